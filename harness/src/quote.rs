//! Input quoted back in a message: control characters escaped (an ESC or a newline in a name
//! must not reach the terminal raw) and long input cut, so a 100 MiB line makes a short error.

/// Characters of input a message shows at most.
pub const SHOWN: usize = 200;

/// `text` as a message shows it: escaped, at most [`SHOWN`] characters, then how much is left
/// out.
pub fn quote(text: &str) -> String {
    let escaped: String = text.escape_debug().collect();
    match escaped.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}… ({} bytes in all)", &escaped[..cut], text.len()),
        None => escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_cut_and_control_characters_escaped() {
        assert_eq!(quote("-A KUBE-X -j DROP"), "-A KUBE-X -j DROP");
        assert_eq!(quote("red\u{1b}[31m\n"), "red\\u{1b}[31m\\n");
        let long = "a".repeat(1 << 20);
        let q = quote(&long);
        assert_eq!(q, format!("{}… (1048576 bytes in all)", "a".repeat(SHOWN)));
    }
}
