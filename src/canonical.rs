//! Canonical JSON text (Python's `gridrail.canonical.canonical_json`): the string escaping of
//! `json.dumps(..., ensure_ascii=True)`, byte for byte. The binding walks the Python document
//! and writes its containers and scalars; this module writes strings, the part that must match
//! Python's encoder exactly.

use std::fmt::Write;

/// Appends `text` as a JSON string literal the way Python's ASCII encoder writes it: printable
/// ASCII as is except `"` and `\`, which are backslash-escaped; `\n \r \t \b \f` by their
/// short escapes; every other character as `\uXXXX` (lower-case hex), a character beyond the
/// BMP as its UTF-16 surrogate pair.
pub fn push_string(out: &mut String, text: &str) {
    out.push('"');
    if text
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        out.push_str(text); // the common case: nothing to escape
        out.push('"');
        return;
    }
    let mut plain = 0; // start of the run of characters written as they are
    for (at, c) in text.char_indices() {
        let escape = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            '\u{8}' => "\\b",
            '\u{c}' => "\\f",
            ' '..='~' => continue,
            _ => "",
        };
        out.push_str(&text[plain..at]);
        plain = at + c.len_utf8();
        if !escape.is_empty() {
            out.push_str(escape);
            continue;
        }
        let code = c as u32;
        if code < 0x1_0000 {
            write!(out, "\\u{code:04x}").expect("writing to a String cannot fail");
        } else {
            let v = code - 0x1_0000;
            let (high, low) = (0xd800 | (v >> 10), 0xdc00 | (v & 0x3ff));
            write!(out, "\\u{high:04x}\\u{low:04x}").expect("writing to a String cannot fail");
        }
    }
    out.push_str(&text[plain..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(text: &str) -> String {
        let mut out = String::new();
        push_string(&mut out, text);
        out
    }

    /// Expected texts are what CPython 3.11's `json.dumps(text)` prints.
    #[test]
    fn strings_are_escaped_as_pythons_ascii_encoder_escapes_them() {
        assert_eq!(encoded(""), r#""""#);
        assert_eq!(encoded("acct_price_7"), r#""acct_price_7""#);
        assert_eq!(encoded("say \"hi\" \\ ok"), r#""say \"hi\" \\ ok""#);
        assert_eq!(encoded("a\nb\rc\td\u{8}e\u{c}f"), r#""a\nb\rc\td\be\ff""#);
        assert_eq!(encoded("\u{0}\u{1f}\u{7f}"), r#""\u0000\u001f\u007f""#);
        assert_eq!(encoded("café ü"), r#""caf\u00e9 \u00fc""#);
        assert_eq!(encoded("\u{ffff}"), r#""\uffff""#);
        assert_eq!(encoded("😀x"), r#""\ud83d\ude00x""#);
        assert_eq!(encoded("\u{10ffff}"), r#""\udbff\udfff""#);
    }
}
