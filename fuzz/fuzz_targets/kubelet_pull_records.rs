//! The kubelet pull record decoder (`imagekeeper::kubelet`) from arbitrary bytes: each decode
//! returns a record or an error and never panics; what decodes as an intent names a non-empty
//! image, what decodes as a pulled record a non-empty imageRef; and the file name of any key is
//! `sha256-` and 64 lower-case hex digits.
#![no_main]

use imagekeeper::kubelet::{decode_intent, decode_pulled_record, record_file_name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(intent) = decode_intent(data) {
        assert!(!intent.image.is_empty());
    }
    if let Ok(record) = decode_pulled_record(data) {
        assert!(!record.image_ref.is_empty());
    }
    let name = record_file_name(&String::from_utf8_lossy(data));
    let hex = name.strip_prefix("sha256-").expect("the kubelet's prefix");
    assert!(
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
});
