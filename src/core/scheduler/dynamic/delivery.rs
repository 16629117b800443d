//! How the dynamic batcher's answers reach their callers: at once, or
//! (`preserve_ordering`) in arrival order.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::queue::Caller;
use crate::core::instance::Done;
pub use crate::core::scheduler::lists::Answer;

impl Caller for Answer {
    fn gone(&self) -> bool {
        Answer::gone(self)
    }
}

/// How answers reach the callers: at once, or in arrival order.
pub(super) enum Delivery {
    Direct,
    Ordered(Mutex<Ordered>),
}

#[derive(Default)]
pub(super) struct Ordered {
    /// The next sequence number to release.
    next: u64,
    /// Answers waiting for earlier ones (`None`: nothing to send).
    ready: BTreeMap<u64, Option<(Answer, Done)>>,
}

impl Delivery {
    pub(super) fn deliver(&self, seq: u64, answer: Option<(Answer, Done)>) {
        match self {
            Delivery::Direct => {
                if let Some((tx, done)) = answer {
                    tx.send(done);
                }
            }
            Delivery::Ordered(ordered) => {
                let mut o = ordered.lock().unwrap();
                o.ready.insert(seq, answer);
                loop {
                    let next = o.next;
                    let Some(answer) = o.ready.remove(&next) else {
                        break;
                    };
                    o.next += 1;
                    if let Some((tx, done)) = answer {
                        tx.send(done);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::DataType;
    use crate::core::types::Tensor;
    use std::time::Duration;
    use tokio::sync::oneshot;

    fn done(n: i32) -> Done {
        Done {
            result: Ok(vec![Tensor {
                name: "OUT".into(),
                datatype: DataType::Int32,
                shape: vec![1],
                data: n.to_le_bytes().to_vec(),
            }]),
            queue: Duration::ZERO,
            compute: Duration::ZERO,
            input: Duration::ZERO,
            output: Duration::ZERO,
            rejected: false,
            parameters: None,
            last: true,
        }
    }

    #[test]
    fn ordered_delivery_waits_for_earlier_answers_and_skips_gone_ones() {
        let d = Delivery::Ordered(Mutex::default());
        let (tx0, mut rx0) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        let (tx3, mut rx3) = oneshot::channel();
        d.deliver(2, Some((Answer::Once(tx2), done(2))));
        d.deliver(3, Some((Answer::Once(tx3), done(3))));
        assert!(rx2.try_recv().is_err(), "2 waits for 0 and 1");
        d.deliver(0, Some((Answer::Once(tx0), done(0))));
        assert!(rx0.try_recv().is_ok());
        assert!(rx2.try_recv().is_err(), "2 still waits for 1");
        d.deliver(1, None); // 1's caller went away
        assert!(rx2.try_recv().is_ok());
        assert!(rx3.try_recv().is_ok());
    }
}
