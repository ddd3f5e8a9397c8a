//! Character tokenizer over the sorted unique characters of a corpus (Appendix A).

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::error::{Result, TsaError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<char>", into = "Vec<char>")]
pub struct CharTokenizer {
    chars: Vec<char>,
    index: HashMap<char, u32>,
}

impl From<Vec<char>> for CharTokenizer {
    fn from(mut chars: Vec<char>) -> Self {
        chars.sort_unstable();
        chars.dedup();
        let index = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i as u32))
            .collect();
        Self { chars, index }
    }
}

impl From<CharTokenizer> for Vec<char> {
    fn from(t: CharTokenizer) -> Self {
        t.chars
    }
}

impl CharTokenizer {
    /// The vocabulary of `text`: its distinct characters, sorted (so '\n' is 0 in Shakespeare).
    pub fn fit(text: &str) -> Result<Self> {
        if text.is_empty() {
            return Err(TsaError::EmptyCorpus);
        }
        let set: BTreeSet<char> = text.chars().collect();
        Ok(Self::from(set.into_iter().collect::<Vec<_>>()))
    }

    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        text.chars()
            .map(|ch| {
                self.index.get(&ch).copied().ok_or(TsaError::UnknownChar {
                    ch,
                    code: ch as u32,
                })
            })
            .collect()
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        ids.iter()
            .map(|&id| {
                self.chars
                    .get(id as usize)
                    .copied()
                    .ok_or(TsaError::UnknownToken(id))
            })
            .collect()
    }
}
