//! Streaming detokenization that never splits a UTF-8 character: a byte-level
//! token may end in the middle of a multi-byte character, so the bytes of an
//! incomplete sequence wait for the next token.

/// Turns token bytes into text as they arrive.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token's bytes; returns the text that is now complete. Invalid
    /// sequences become U+FFFD as soon as they are known to be invalid.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // SAFETY-free: from_utf8 just validated this prefix.
                    out.push_str(std::str::from_utf8(&rest[..valid]).expect("validated prefix"));
                    match e.error_len() {
                        // Incomplete sequence at the end: keep it for later.
                        None => {
                            rest = &rest[valid..];
                            break;
                        }
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &rest[valid + n..];
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Ends the stream: any incomplete sequence left becomes U+FFFD.
    pub fn flush(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }

    /// True while bytes of an incomplete character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_back_split_characters() {
        let text = "aé€😀b";
        let bytes = text.as_bytes();
        // Feed one byte at a time: the output must be whole characters only.
        let mut d = StreamDecoder::new();
        let mut out = String::new();
        for b in bytes {
            let s = d.push_bytes(&[*b]);
            out.push_str(&s);
        }
        out.push_str(&d.flush());
        assert_eq!(out, text);

        let mut d = StreamDecoder::new();
        assert_eq!(d.push_bytes(&[0xF0, 0x9F]), "");
        assert!(d.has_pending());
        assert_eq!(d.push_bytes(&[0x98, 0x80, b'x']), "😀x");
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let mut d = StreamDecoder::new();
        assert_eq!(d.push_bytes(&[b'a', 0xFF, b'b']), "a\u{FFFD}b");
        assert_eq!(d.push_bytes(&[0xE2, 0x82]), "");
        assert_eq!(d.flush(), "\u{FFFD}");
        assert_eq!(d.flush(), "");
    }
}
