//! Registry answers read within a size: a registry is trusted for what it says, not for how
//! much of it there is. A broken or hostile server (or a proxy in front of it) that sends an
//! endless or enormous body is refused at the limit, with nothing more read, rather than
//! held whole in memory.

use futures::{Stream, StreamExt};

/// The default largest answer, as for watched files: a Eureka registry of 10,000 instances
/// answers a full fetch in about 20 MB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 64 << 20;

/// Why an answer could not be read whole.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnswerError<E> {
    /// It is larger than the limit (by its declared length, or as it arrived).
    #[error(
        "an answer larger than {max} bytes (--max-registry-answer-bytes); nothing more of it \
         was read"
    )]
    TooLarge {
        /// The limit.
        max: usize,
    },
    /// The body broke off.
    #[error("{0}")]
    Read(E),
}

/// The body `chunks`, whose length the answer declared as `declared` (`Content-Length`), at
/// most `max` bytes: refused from its declared length before anything is read, and as soon as
/// what arrived passes `max` otherwise.
pub async fn read_within<S, B, E>(
    declared: Option<u64>,
    max: usize,
    chunks: S,
) -> Result<Vec<u8>, AnswerError<E>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    if declared.is_some_and(|n| n > max as u64) {
        return Err(AnswerError::TooLarge { max });
    }
    let capacity = declared.map_or(0, |n| n as usize);
    let mut body = Vec::with_capacity(capacity);
    let mut chunks = std::pin::pin!(chunks);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(AnswerError::Read)?;
        let chunk = chunk.as_ref();
        if body.len() + chunk.len() > max {
            return Err(AnswerError::TooLarge { max });
        }
        body.extend_from_slice(chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(sizes: &[usize]) -> impl Stream<Item = Result<Vec<u8>, String>> {
        futures::stream::iter(sizes.iter().map(|n| Ok(vec![b'x'; *n])).collect::<Vec<_>>())
    }

    #[tokio::test]
    async fn an_answer_within_the_limit_is_read_whole() {
        let body = read_within(Some(30), 30, chunks(&[10, 20])).await;
        assert_eq!(body.map(|b| b.len()), Ok(30));
        let undeclared = read_within(None, 30, chunks(&[10, 20])).await;
        assert_eq!(undeclared.map(|b| b.len()), Ok(30));
    }

    #[tokio::test]
    async fn a_larger_answer_is_refused_by_its_length_or_as_it_arrives() {
        let declared = read_within(Some(31), 30, chunks(&[])).await;
        assert_eq!(declared, Err(AnswerError::TooLarge { max: 30 }));
        // No length, or a false one: refused at the chunk that passes the limit.
        let endless = futures::stream::repeat_with(|| Ok::<_, String>(vec![0u8; 16]));
        let streamed = read_within(Some(10), 30, endless).await;
        assert_eq!(streamed, Err(AnswerError::TooLarge { max: 30 }));
        let broken = futures::stream::iter([Ok(vec![1u8]), Err("reset".to_string())]);
        let err = read_within(None, 30, broken).await;
        assert_eq!(err, Err(AnswerError::Read("reset".into())));
        assert!(
            AnswerError::<String>::TooLarge { max: 30 }
                .to_string()
                .contains("--max-registry-answer-bytes")
        );
    }
}
