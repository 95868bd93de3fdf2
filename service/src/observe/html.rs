//! What every part of the status page writes its text with: HTML escaping and times as ages.
//!
//! Uses the standard library only.

use std::time::SystemTime;

/// Escapes text for HTML.
pub(super) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(super) fn ago(at: SystemTime) -> String {
    let since = SystemTime::now().duration_since(at).unwrap_or_default();
    format!("{} s ago", since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
