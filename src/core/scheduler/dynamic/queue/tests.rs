//! Unit tests of the dynamic batcher's queue: pure state, times passed in.

use super::*;
use crate::core::types::DataType;

type Request = super::Request<oneshot::Sender<()>>;
type Queue = super::Queue<oneshot::Sender<()>>;

fn request(batch: usize, width: i64, enqueued: Instant) -> Request {
    prio(batch, width, enqueued, 0, 0)
}

fn prio(batch: usize, width: i64, enqueued: Instant, priority: u64, timeout_us: u64) -> Request {
    let (reply, rx) = oneshot::channel();
    std::mem::forget(rx);
    Request {
        inputs: vec![Tensor {
            name: "IN".into(),
            datatype: DataType::Int32,
            shape: vec![batch as i64, width],
            data: vec![0; batch * width as usize * 4],
        }],
        outputs: vec!["OUT".into()],
        batch,
        enqueued,
        reply,
        pending: Default::default(),
        priority,
        timeout_us,
        deadline: None,
        seq: width as u64,
        info: None,
    }
}

fn config(max: usize, preferred: &[usize], delay_us: u64) -> BatchConfig {
    BatchConfig {
        max_batch_size: max,
        preferred: preferred.to_vec(),
        max_queue_delay: Duration::from_micros(delay_us),
        preserve_ordering: false,
        levels: vec![QueuePolicy::default()],
        default_level: 1,
        io: Default::default(),
    }
}

fn queue(c: &BatchConfig, requests: impl IntoIterator<Item = Request>) -> Queue {
    let mut q = Queue::new(c);
    for r in requests {
        assert!(q.push(c, r).is_ok());
    }
    q
}

#[test]
fn sends_at_max_or_the_largest_preferred_size() {
    let now = Instant::now();
    let c = config(8, &[], 1000);
    let q = queue(&c, (0..8).map(|_| request(1, 4, now)));
    assert_eq!(decide(&q, &c, now), Decision::Send(8));
    let q = queue(&c, (0..7).map(|_| request(1, 4, now)));
    assert_eq!(
        decide(&q, &c, now),
        Decision::Wait(now + Duration::from_micros(1000))
    );
    let c = config(8, &[2, 4], 1000);
    let q = queue(&c, (0..5).map(|_| request(1, 4, now)));
    assert_eq!(decide(&q, &c, now), Decision::Send(4));
}

#[test]
fn a_preferred_size_goes_at_once_else_the_delay_then_everything() {
    let now = Instant::now();
    let c = config(8, &[2, 4], 500);
    let q = queue(&c, (0..3).map(|_| request(1, 4, now)));
    assert_eq!(decide(&q, &c, now), Decision::Send(2), "2 is preferred");
    let q = queue(&c, (0..1).map(|_| request(1, 4, now)));
    assert_eq!(
        decide(&q, &c, now),
        Decision::Wait(now + Duration::from_micros(500))
    );
    let c = config(8, &[4], 500);
    let q = queue(&c, (0..3).map(|_| request(1, 4, now)));
    assert_eq!(
        decide(&q, &c, now),
        Decision::Wait(now + Duration::from_micros(500))
    );
    let later = now + Duration::from_micros(600);
    assert_eq!(decide(&q, &c, later), Decision::Send(3));
    // Past the delay the whole batch goes, not the preferred prefix.
    let c = config(8, &[2, 4], 500);
    let q = queue(&c, (0..3).map(|_| request(1, 4, now)));
    assert_eq!(decide(&q, &c, later), Decision::Send(3));
    // No delay: whatever is there.
    let c = config(8, &[4], 0);
    assert_eq!(decide(&q, &c, now), Decision::Send(3));
}

#[test]
fn the_part_before_a_request_that_passes_the_largest_preferred_size_goes() {
    let now = Instant::now();
    let c = config(8, &[4], 500);
    let q = queue(
        &c,
        [
            request(1, 4, now),
            request(1, 4, now),
            request(1, 4, now),
            request(2, 4, now),
        ],
    );
    assert_eq!(decide(&q, &c, now), Decision::Send(3), "3 + 2 > 4");
}

#[test]
fn requests_that_cannot_join_end_the_batch() {
    let now = Instant::now();
    let c = config(8, &[], 1000);
    let q = queue(
        &c,
        [request(1, 4, now), request(1, 4, now), request(1, 5, now)],
    );
    assert_eq!(decide(&q, &c, now), Decision::Send(2), "other shape");
    let q = queue(&c, [request(3, 4, now), request(6, 4, now)]);
    assert_eq!(decide(&q, &c, now), Decision::Send(1), "3 + 6 > 8");
    // Requests that are batches count by their batch size.
    let q = queue(&c, [request(3, 4, now), request(5, 4, now)]);
    assert_eq!(decide(&q, &c, now), Decision::Send(2));
}

#[test]
fn ragged_inputs_batch_across_shapes() {
    let now = Instant::now();
    let mut c = config(8, &[], 1000);
    c.io = crate::core::batch_io::BatchIo::from_config(
        &crate::core::config::parse_config(
            br#"name: "m" backend: "identity" max_batch_size: 8
                input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true } ]
                output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]"#,
        )
        .expect("parses")
        .config,
    );
    let q = queue(
        &c,
        [request(1, 4, now), request(1, 5, now), request(1, 9, now)],
    );
    assert_eq!(
        decide(&q, &c, now),
        Decision::Wait(now + Duration::from_micros(1000))
    );
    assert_eq!(
        decide(&q, &c, now + Duration::from_millis(2)),
        Decision::Send(3)
    );
}

fn levels(c: &mut BatchConfig, policies: Vec<QueuePolicy>, default_level: usize) {
    c.levels = policies;
    c.default_level = default_level;
}

#[test]
fn higher_priorities_overtake_and_batch_first() {
    let now = Instant::now();
    let mut c = config(2, &[], 0);
    levels(&mut c, vec![QueuePolicy::default(); 3], 2);
    // Arrival order: default (level 2), level 3, level 1, priority 9
    // (no such level: the default), priority 0 (the default).
    let q = queue(
        &c,
        [
            prio(1, 20, now, 0, 0),
            prio(1, 30, now, 3, 0),
            prio(1, 10, now, 1, 0),
            prio(1, 21, now, 9, 0),
            prio(1, 22, now, 0, 0),
        ],
    );
    let order: Vec<u64> = q.iter().map(|r| r.seq).collect();
    assert_eq!(order, vec![10, 20, 21, 22, 30]);
    let mut q = q;
    assert_eq!(
        decide(&q, &c, now),
        Decision::Send(1),
        "10 and 20 differ in shape"
    );
    let batch: Vec<u64> = q.pop(2).iter().map(|r| r.seq).collect();
    assert_eq!(batch, vec![10, 20]);
}

#[test]
fn the_delay_counts_from_the_oldest_request_of_the_batch() {
    let now = Instant::now();
    let mut c = config(8, &[], 1000);
    levels(&mut c, vec![QueuePolicy::default(); 2], 2);
    let old = prio(1, 4, now, 2, 0);
    let new = prio(1, 4, now + Duration::from_micros(800), 1, 0);
    let q = queue(&c, [old, new]);
    assert_eq!(
        decide(&q, &c, now + Duration::from_micros(900)),
        Decision::Wait(now + Duration::from_micros(1000))
    );
}

#[test]
fn a_full_level_refuses_at_once_and_other_levels_still_take_requests() {
    let now = Instant::now();
    let mut c = config(8, &[], 1000);
    let small = QueuePolicy {
        max_queue_size: 2,
        ..QueuePolicy::default()
    };
    levels(&mut c, vec![small, QueuePolicy::default()], 1);
    let mut q = queue(&c, [prio(1, 4, now, 1, 0), prio(1, 4, now, 1, 0)]);
    let Err((e, _)) = q.push(&c, prio(1, 4, now, 1, 0)) else {
        panic!("a full level took a request");
    };
    assert_eq!(e.kind, crate::core::error::ErrorKind::Unavailable);
    assert_eq!(e.message, "Exceeds maximum queue size");
    assert!(q.push(&c, prio(1, 4, now, 2, 0)).is_ok());
    assert_eq!(q.len(), 3);
}

#[test]
fn timeouts_reject_or_delay() {
    let now = Instant::now();
    let mut c = config(8, &[], 0);
    let reject = QueuePolicy {
        default_timeout: Duration::from_micros(100),
        ..QueuePolicy::default()
    };
    let delay = QueuePolicy {
        action: TimeoutAction::Delay,
        default_timeout: Duration::from_micros(100),
        ..QueuePolicy::default()
    };
    levels(&mut c, vec![reject, delay], 1);
    let mut q = queue(
        &c,
        [
            prio(1, 1, now, 1, 0),
            prio(1, 2, now + Duration::from_micros(50), 1, 0),
            prio(1, 3, now, 2, 0),
            prio(1, 4, now + Duration::from_micros(50), 2, 0),
        ],
    );
    assert!(q.times_out());
    assert!(!queue(&config(8, &[], 0), []).times_out());
    assert_eq!(q.next_timeout(), Some(now + Duration::from_micros(100)));
    assert!(q.expire(now + Duration::from_micros(99)).is_empty());
    let rejected = q.expire(now + Duration::from_micros(100));
    assert_eq!(rejected.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1]);
    // Request 3 timed out under DELAY: it now comes after request 4.
    assert_eq!(q.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![2, 4, 3]);
    let later = now + Duration::from_micros(200);
    assert_eq!(
        q.expire(later).iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![2]
    );
    // Request 4 timed out too, and joins the delayed ones after 3.
    assert_eq!(q.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(
        q.next_timeout(),
        None,
        "delayed requests do not time out again"
    );
}

#[test]
fn a_request_may_only_shorten_its_timeout_when_allowed() {
    let fixed = QueuePolicy {
        default_timeout: Duration::from_micros(1000),
        ..QueuePolicy::default()
    };
    assert_eq!(fixed.timeout(10), Some(Duration::from_micros(1000)));
    let open = QueuePolicy {
        allow_override: true,
        ..fixed.clone()
    };
    assert_eq!(open.timeout(10), Some(Duration::from_micros(10)));
    assert_eq!(open.timeout(5000), Some(Duration::from_micros(1000)));
    assert_eq!(open.timeout(0), Some(Duration::from_micros(1000)));
    let none = QueuePolicy {
        allow_override: true,
        ..QueuePolicy::default()
    };
    assert_eq!(none.timeout(0), None);
    assert_eq!(
        none.timeout(70),
        None,
        "no default timeout: nothing to lower"
    );
}

#[test]
fn levels_come_from_the_config() {
    let text = r#"
        name: "m" backend: "identity" max_batch_size: 8
        input [{ name: "IN" data_type: TYPE_INT32 dims: [-1] allow_ragged_batch: true }]
        output [{ name: "OUT" data_type: TYPE_INT32 dims: [-1] }]
        dynamic_batching {
          priority_levels: 3 default_priority_level: 2
          default_queue_policy { max_queue_size: 4 }
          priority_queue_policy { key: 1 value { timeout_action: DELAY default_timeout_microseconds: 50 } }
          preserve_ordering: true
        }"#;
    let config = crate::core::config::parse_config(text.as_bytes())
        .expect("parses")
        .config;
    let c = BatchConfig::from_config(&config).expect("batches");
    assert_eq!(c.levels.len(), 3);
    assert_eq!(c.levels[0].action, TimeoutAction::Delay);
    assert_eq!(c.levels[0].default_timeout, Duration::from_micros(50));
    assert_eq!(c.levels[1].max_queue_size, 4);
    assert_eq!(c.levels[2].max_queue_size, 4);
    assert_eq!(c.default_level, 2);
    assert_eq!(c.level_of(0), 1);
    assert_eq!(c.level_of(3), 2);
    assert_eq!(c.level_of(4), 1);
    assert!(c.preserve_ordering);
    assert!(c.io.is_ragged("IN"));
}
