//! Image reference parsing never panics; what parses re-serializes (`Display`) to a string that
//! parses to the same reference.
#![no_main]

use imagekeeper::pull::{ImageReference, apply_default_image_tag};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = apply_default_image_tag(text);
    if let Ok(reference) = ImageReference::parse_normalized(text) {
        let shown = reference.to_string();
        match ImageReference::parse_normalized(&shown) {
            Ok(again) => assert_eq!(again, reference, "{text:?} re-serialized as {shown:?}"),
            Err(e) => panic!("{text:?} re-serialized as {shown:?}, which does not parse: {e}"),
        }
    }
});
