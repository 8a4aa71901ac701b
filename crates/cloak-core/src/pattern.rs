//! Redis's glob patterns, for `KEYS` and `SCAN … MATCH`: `*`, `?`, `[abc]`, `[^abc]`, `[a-z]`
//! and `\` to take the next byte literally, matched byte by byte as Redis's `stringmatchlen`
//! does (case-sensitive).

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative with one backtrack point: the last `*` seen and where it resumed. A later `*`
    // supersedes an earlier one, so the work stays O(pattern × text) for hostile patterns.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
            continue;
        }
        if p < pattern.len()
            && let Some(next) = single(pattern, p, text[t])
        {
            p = next;
            t += 1;
            continue;
        }
        match star {
            // Let the last `*` take one more byte and try again from there.
            Some((sp, st)) => {
                star = Some((sp, st + 1));
                p = sp + 1;
                t = st + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches one byte against the element at `pattern[p]` (not `*`): the position after the
/// element when it matches, `None` when not.
fn single(pattern: &[u8], p: usize, byte: u8) -> Option<usize> {
    match pattern[p] {
        b'?' => Some(p + 1),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == byte).then_some(p + 2),
        b'[' => class(pattern, p + 1, byte),
        c => (c == byte).then_some(p + 1),
    }
}

/// A `[…]` class starting after its `[`; like Redis, an unclosed class runs to the pattern's end.
fn class(pattern: &[u8], mut p: usize, byte: u8) -> Option<usize> {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut matched = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            matched |= pattern[p + 1] == byte;
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' && pattern[p + 2] != b']' {
            let (low, high) = (
                pattern[p].min(pattern[p + 2]),
                pattern[p].max(pattern[p + 2]),
            );
            matched |= (low..=high).contains(&byte);
            p += 3;
        } else {
            matched |= pattern[p] == byte;
            p += 1;
        }
    }
    // Past the `]` (or at the end of an unclosed class).
    let after = (p + 1).min(pattern.len());
    (matched != negate).then_some(after)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_as_in_redis() {
        let yes = [
            ("*", ""),
            ("*", "abc"),
            ("a*", "abc"),
            ("*c", "abc"),
            ("a?c", "abc"),
            ("h[ae]llo", "hello"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("user:*:name", "user:42:name"),
            ("a\\*", "a*"),
            ("*a*b*", "xxaxxbxx"),
        ];
        for (pattern, text) in yes {
            assert!(
                matches(pattern.as_bytes(), text.as_bytes()),
                "{pattern} {text}"
            );
        }
        let no = [
            ("a*", "bac"),
            ("a?c", "ac"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("a\\*", "ab"),
            ("abc", "abcd"),
            ("*a*b", "xxaxxbxxc"),
        ];
        for (pattern, text) in no {
            assert!(
                !matches(pattern.as_bytes(), text.as_bytes()),
                "{pattern} {text}"
            );
        }
    }
}
