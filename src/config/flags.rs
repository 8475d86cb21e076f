//! [`FlagValues`]: the settings given as command-line flags, `None` (or empty) when not
//! given, and the `--set KEY=VALUE`s. Its setting fields are generated from the settings table
//! (`settings.rs`): one per entry with a flag, named and typed as the entry's `flag` says, so
//! a setting with a flag cannot lack its field. The process-level flags that are no config
//! key (`--db`, `--admin-socket`, and `run`'s `--metrics-address` and loop periods) are written
//! here. Invariant: a flag given wins over `--set`, which wins over the file
//! ([`super::AgentConfig::resolve`]).

use std::path::PathBuf;

/// The settings table's callback: [`FlagValues`], with a field per entry that has a flag.
macro_rules! flag_values_from_table {
    (
        settings: $settings:tt
        flags: [ $( (
            $key:literal, $ff:ident : $fty:ty = $fname:literal, $status:ident, $attributes:tt,
            $help:literal, $inspect_old:tt
        ) )* ]
    ) => {
        /// Values given as flags; `None` means not given.
        #[derive(Debug, Default, Clone, PartialEq)]
        pub struct FlagValues {
            /// `--db`: the record database file.
            pub db: Option<PathBuf>,
            $(
                #[doc = concat!("`--", $fname, "`, which sets `", $key, "`: ", $help)]
                pub $ff: $fty,
            )*
            /// `--admin-socket`: the agent's admin socket.
            pub admin_socket: Option<PathBuf>,
            /// `run --metrics-address`: `HOST:PORT` of the metrics and health endpoint.
            pub metrics_address: Option<String>,
            /// `run --detect-period`: Go duration between detects, at least 1s.
            pub detect_period: Option<String>,
            /// `run --gc-period`: Go duration between GC cycles, at least 1s.
            pub gc_period: Option<String>,
            /// `run --image-cache-period`: Go duration between image cache refreshes, at least
            /// 1s.
            pub image_cache_period: Option<String>,
            /// `--set KEY=VALUE`s, as a file holding just them ([`super::parse_set`]): over the
            /// file, under a flag that sets the same setting.
            pub set: super::FileConfig,
        }
    };
}

crate::imagekeeper_settings!(flag_values_from_table);
