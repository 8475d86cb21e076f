//! Runtime pins (`runtimePins`): the agent labels what imagekeeper keeps
//! `io.cri-containerd.pinned=pinned` in containerd, and the tests read the result back through
//! CRI ListImages themselves (`lab`: on the lab's containerd release, 1.6, 1.7 or 2.1; each
//! test's name and assertions say what each release must do; `scripted`: the in-process fake
//! runtime's containerd Images service, whose CRI can be told not to carry the labels;
//! `record`: the agent's record of the names it labelled, against forged and stripped labels).

mod lab;
mod record;
mod scripted;
