//! Redis's glob patterns (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a-z]`, and `\` to escape.

/// Whether `text` matches `pattern`; `nocase` compares ASCII letters without case, as
/// `CONFIG GET` does.
pub fn matches(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    let (mut p, mut t) = (0, 0);
    // Where to resume after the last `*`: the pattern just past it, and the text it has eaten.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pattern, p, text[t], nocase),
            Some(b'\\') if p + 1 < pattern.len() => eq(pattern[p + 1], text[t]).then_some(p + 2),
            Some(&c) => eq(c, text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((after_star, eaten))) => {
                // Let the last `*` eat one more byte and try again from there.
                star = Some((after_star, eaten + 1));
                p = after_star;
                t = eaten + 1;
            }
            (None, None) => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[open] == b'['`; the index past its
/// closing `]` if it matches. An unclosed class runs to the end of the pattern, as in Redis.
fn class(pattern: &[u8], open: usize, c: u8, nocase: bool) -> Option<usize> {
    let fold = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
    let c = fold(c);
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            hit |= fold(pattern[i + 1]) == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (mut low, mut high) = (fold(pattern[i]), fold(pattern[i + 2]));
            if low > high {
                std::mem::swap(&mut low, &mut high);
            }
            hit |= (low..=high).contains(&c);
            i += 3;
        } else {
            hit |= fold(pattern[i]) == c;
            i += 1;
        }
    }
    (hit != negate).then_some((i + 1).min(pattern.len()))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns_match_like_redis() {
        let yes = |p: &str, t: &str| matches(p.as_bytes(), t.as_bytes(), false);
        assert!(yes("*", ""));
        assert!(yes("maxmemory-p*", "maxmemory-policy"));
        assert!(!yes("maxmemory-p*", "maxclients"));
        assert!(yes("h?llo", "hello"));
        assert!(!yes("h?llo", "hllo"));
        assert!(yes("h[ae]llo", "hallo"));
        assert!(!yes("h[^e]llo", "hello"));
        assert!(yes("h[a-b]llo", "hbllo"));
        assert!(yes("h[b-a]llo", "hallo"));
        assert!(yes("a\\*b", "a*b"));
        assert!(!yes("a\\*b", "axb"));
        assert!(yes("*a*b*", "xxaxxbxx"));
        assert!(!yes("*a*b", "xxaxxbxx"));
        assert!(yes("user:*:name", "user:42:name"));
        assert!(!yes("abc", "abcd"));
        assert!(matches(b"MAXCLIENTS", b"maxclients", true));
        assert!(!matches(b"MAXCLIENTS", b"maxclients", false));
    }
}
