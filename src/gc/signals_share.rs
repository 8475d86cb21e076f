//! The keep share's side of [`ClusterSignals`] (`crate::gc::keep_share` has the rule): the
//! share in force, what it left out at the last detect, and whether that is news.
//!
//! Invariants: a share of 100 % or more is no limit; the news is set only when a detect turns
//! the share from within to over, and taken once.

use super::ClusterSignals;
use crate::gc::KeepsOverShare;

/// How a detect's outcome changed the share's state, for the one log line each way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareChange {
    /// Over the share, and the last detect was not.
    NowOver,
    /// Within the share, and the last detect was over it.
    NowWithin,
    /// As the last detect found it.
    Same,
}

impl ClusterSignals {
    /// The share of the image filesystem the signals' keeps may hold, in percent
    /// (`clusterSignalsKeepShare`); 100 or more: no limit.
    pub fn set_keep_share(&self, percent: u8) {
        self.write().keep_share = (percent < 100).then_some(percent);
    }

    /// The share in force, in percent (100: no limit).
    pub fn keep_share(&self) -> u8 {
        self.read().keep_share.unwrap_or(100)
    }

    /// Records what the share left out at a detect (`None`: nothing).
    pub fn record_keep_share(&self, over: Option<KeepsOverShare>) -> ShareChange {
        let mut state = self.write();
        let change = match (state.over_share.is_some(), over.is_some()) {
            (false, true) => ShareChange::NowOver,
            (true, false) => ShareChange::NowWithin,
            _ => ShareChange::Same,
        };
        match change {
            ShareChange::NowOver => state.over_share_news = true,
            ShareChange::NowWithin => state.over_share_news = false,
            ShareChange::Same => {}
        }
        state.over_share = over;
        change
    }

    /// What the share left out at the last detect.
    pub fn keeps_over_share(&self) -> Option<KeepsOverShare> {
        self.read().over_share.clone()
    }

    /// What the share left out, once after a detect turned it over (the agent's Event).
    pub fn take_over_share_news(&self) -> Option<KeepsOverShare> {
        let mut state = self.write();
        if !std::mem::take(&mut state.over_share_news) {
            return None;
        }
        state.over_share.clone()
    }
}
