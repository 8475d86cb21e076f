//! Turning a panic inside redb into a refusal, quietly. redb 4.5 can panic reading a damaged
//! file (an index out of range in `btree_iters.rs`, an `unreachable!` on a zeroed page, invalid
//! UTF-8 in a type name); `inspect` reads only checksum-verified copies, and this guard is the
//! second line: a panic while opening or scanning becomes [`InspectError::Damaged`], and the
//! panic hook prints nothing while the guard runs on this thread (other threads, and panics
//! outside a guard, keep the hook they had).

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, PanicHookInfo, catch_unwind};
use std::path::Path;
use std::sync::Once;

use super::InspectError;

thread_local! {
    /// Whether this thread is inside [`refuse_panics`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// What the last quiet panic said, and where.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

static INSTALL: Once = Once::new();

fn describe(info: &PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    match info.location() {
        Some(at) => format!("{message} ({}:{})", at.file(), at.line()),
        None => message,
    }
}

/// Wraps the current panic hook once: on a thread inside [`refuse_panics`] it records the
/// panic instead of printing it.
fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                LAST.with(|last| *last.borrow_mut() = Some(describe(info)));
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic inside it becomes [`InspectError::Damaged`] naming `path`.
pub(super) fn refuse_panics<T>(
    path: &Path,
    f: impl FnOnce() -> Result<T, InspectError>,
) -> Result<T, InspectError> {
    install();
    let was_quiet = QUIET.with(|q| q.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was_quiet));
    outcome.unwrap_or_else(|_| {
        let detail = LAST
            .with(|last| last.borrow_mut().take())
            .unwrap_or_else(|| "no message".to_owned());
        Err(InspectError::Damaged {
            path: path.to_owned(),
            detail,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_a_damaged_error_naming_the_file_and_the_panic() {
        let r: Result<(), InspectError> =
            refuse_panics(Path::new("/x.redb"), || panic!("index out of bounds"));
        let message = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("/x.redb") && message.contains("index out of bounds"),
            "{message}"
        );
        assert!(!message.contains("panicked"), "{message}");
        assert!(
            !QUIET.with(Cell::get),
            "the guard restores the hook's voice"
        );
    }
}
