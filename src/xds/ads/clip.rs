//! Client text cut to a size fit for logs, errors and debug pages.
//!
//! What a client sends is kept and shown only this long: a NACK's `error_detail` (Envoy's own
//! are a few hundred bytes; one client sent 16.7 MB) and node ids echoed in refusals. Control
//! characters are left as they are here: the log formatter escapes them, JSON escapes them,
//! and `Debug` formatting (`{:?}`) escapes them in error messages.

use std::borrow::Cow;

/// How much of a NACK's `error_detail` is kept, logged and shown in `/debug/syncz`.
pub(super) const NACK_DETAIL: usize = 4 << 10;

/// How much of a refused node id an error or a log line repeats.
pub(super) const NODE_ID: usize = 128;

/// `text` whole when it is at most `max` bytes; else its first `max` bytes (cut at a
/// character boundary) followed by `… (N bytes in all)`.
pub(super) fn clip(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes in all)", &text[..cut], text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_at_a_character_boundary_and_says_how_long_it_was() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("abcdef", 3), "abc… (6 bytes in all)");
        // 'é' is two bytes: a cut inside it moves back to its start.
        assert_eq!(clip("aé", 2), "a… (3 bytes in all)");
        let detail = "x".repeat(16 << 20);
        let kept = clip(&detail, NACK_DETAIL);
        assert!(kept.len() < NACK_DETAIL + 40, "{}", kept.len());
        assert!(kept.ends_with("(16777216 bytes in all)"));
    }
}
