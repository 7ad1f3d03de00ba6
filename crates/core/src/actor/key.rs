//! The actor key wire format (docs/generations.md).
//!
//! A key is a list of string segments joined with `/`. Inside a segment `\`
//! and `/` are escaped with a backslash, an empty segment is written `\0`, and
//! the empty key is `""` (`"/"` is accepted when decoding). Decoding is
//! lenient: a trailing lone `\` is kept literally.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActorKey(pub Vec<String>);

impl ActorKey {
    pub fn segments(&self) -> &[String] {
        &self.0
    }

    pub fn format(&self) -> String {
        self.0
            .iter()
            .map(|segment| {
                if segment.is_empty() {
                    return "\\0".to_string();
                }
                let mut out = String::with_capacity(segment.len());
                for c in segment.chars() {
                    if c == '\\' || c == '/' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    pub fn parse(raw: &str) -> ActorKey {
        if raw.is_empty() || raw == "/" {
            return ActorKey(Vec::new());
        }
        let mut segments = Vec::new();
        let mut current = String::new();
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('0') if current.is_empty() => {}
                    Some(next) => current.push(next),
                    None => current.push('\\'),
                },
                '/' => {
                    segments.push(std::mem::take(&mut current));
                }
                _ => current.push(c),
            }
        }
        segments.push(current);
        ActorKey(segments)
    }
}

#[cfg(test)]
mod tests {
    use super::ActorKey;

    fn key(parts: &[&str]) -> ActorKey {
        ActorKey(parts.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn round_trips_escapes_and_empty_segments() {
        for k in [key(&[]), key(&["a"]), key(&["a", "b"]), key(&["a/b", "c\\d"]), key(&["", "x"])] {
            assert_eq!(ActorKey::parse(&k.format()), k, "{:?}", k.format());
        }
    }

    #[test]
    fn formats_like_the_reference() {
        assert_eq!(key(&["a/b", ""]).format(), "a\\/b/\\0");
        assert_eq!(key(&[]).format(), "");
        assert_eq!(ActorKey::parse("/"), key(&[]));
        assert_eq!(ActorKey::parse("a\\"), key(&["a\\"]));
    }
}
