//! Kinds of characters, for asking where a router spends its compute (spaces, punctuation,
//! capitals, the first letter of a word or a later one). Shared by `native-bench analyze` and the
//! web app's routing summary.

/// The classes, in the order [`class`] numbers them.
pub const CLASSES: [&str; 7] = [
    "space",
    "newline",
    "punctuation",
    "capital",
    "word-initial letter",
    "mid-word letter",
    "other",
];

/// The class of `c` (an index into [`CLASSES`]) given the character before it.
pub fn class(prev: Option<char>, c: char) -> usize {
    match c {
        ' ' => 0,
        '\n' => 1,
        c if c.is_ascii_punctuation() => 2,
        c if c.is_uppercase() => 3,
        c if c.is_alphabetic() => {
            if prev.is_some_and(|p| p.is_alphabetic() || p == '\'') {
                5
            } else {
                4
            }
        }
        _ => 6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_of_a_line() {
        let text = "To be, or\nnot 'tis 9";
        let got: Vec<&str> = text
            .chars()
            .scan(None, |prev, c| {
                let k = class(*prev, c);
                *prev = Some(c);
                Some(CLASSES[k])
            })
            .collect();
        assert_eq!(&got[..3], ["capital", "mid-word letter", "space"]);
        assert_eq!(got[3], "word-initial letter");
        assert_eq!(got[5], "punctuation");
        assert_eq!(got[9], "newline");
        // After an apostrophe a letter continues its word ('tis).
        assert_eq!(got[15], "mid-word letter");
        assert_eq!(got[14], "punctuation");
        assert_eq!(got[19], "other");
    }
}
