//! The config source's model: every document of a file decoded into a configuration object
//! and judged (`decode`), and the last good version of every object kept, per file, with the
//! events that tell the consumer what changed (`state`, [`ConfigState`]).

mod decode;
mod state;

pub use self::decode::Validator;
pub(crate) use self::decode::{Item, Rejected, VALIDATE, read, unknown_kind};
pub use self::state::ConfigState;
pub(crate) use self::state::{Located, compose};

#[cfg(test)]
mod tests;
