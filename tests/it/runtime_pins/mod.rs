//! Runtime pins (`runtimePins`): the agent labels what imagekeeper keeps
//! `io.cri-containerd.pinned=pinned` in containerd, and the tests read the result back through
//! CRI ListImages themselves (`lab`: on the lab's containerd release, 1.6, 1.7 or 2.1; each
//! test's name and assertions say what each release must do).

mod lab;
