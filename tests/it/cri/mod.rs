//! Tests of the CRI layer: `fake` against the in-process fake runtime, `lab` against the real
//! containerd of `scripts/cri-lab`.

mod fake;
mod lab;
