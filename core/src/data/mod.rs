//! Data: the character tokenizer, corpus splits and batches, and the synthetic copy/sort tasks.

pub mod batch;
pub mod corpus;
pub mod source;
pub mod tasks;
pub mod tokenizer;

pub use batch::Batch;
pub use corpus::{Corpus, Split, WindowLog};
pub use source::Data;
pub use tasks::{Task, TaskSet};
pub use tokenizer::CharTokenizer;
