//! The code generated from the containerd API subsets `inspect disk` reads and `prune
//! --orphans` calls
//! (`proto/containerd/services/{namespaces,containers,tasks,snapshots,content,leases,introspection}`,
//! `proto/containerd/types/task`, `proto/google/rpc`), nested as their packages so the
//! generated code's relative paths (`super::...`) resolve. Only `containerd_view.rs` (the
//! reads), `containerd_prune.rs` (the removals) and `containerd_convert.rs` (the conversions)
//! use it.

#![allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]

pub mod google {
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

pub mod containerd {
    pub mod v1 {
        pub mod types {
            tonic::include_proto!("containerd.v1.types");
        }
    }
    pub mod services {
        pub mod namespaces {
            pub mod v1 {
                tonic::include_proto!("containerd.services.namespaces.v1");
            }
        }
        pub mod containers {
            pub mod v1 {
                tonic::include_proto!("containerd.services.containers.v1");
            }
        }
        pub mod tasks {
            pub mod v1 {
                tonic::include_proto!("containerd.services.tasks.v1");
            }
        }
        pub mod snapshots {
            pub mod v1 {
                tonic::include_proto!("containerd.services.snapshots.v1");
            }
        }
        pub mod content {
            pub mod v1 {
                tonic::include_proto!("containerd.services.content.v1");
            }
        }
        pub mod leases {
            pub mod v1 {
                tonic::include_proto!("containerd.services.leases.v1");
            }
        }
        pub mod introspection {
            pub mod v1 {
                tonic::include_proto!("containerd.services.introspection.v1");
            }
        }
    }
}
