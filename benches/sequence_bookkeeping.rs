//! What the sequence batcher's bookkeeping (`core::scheduler::sequence::places`)
//! costs per request as sequences grow: Triton's `simple_dyna_sequence`
//! keeps up to 1024 candidate sequences per instance. Each request of a
//! random live sequence goes through submit, the idle and reap checks the
//! batcher thread makes on every wake, and batch formation on two
//! instances. The reference, in the same run: the same with 16 sequences
//! (the cost should not grow with the number of sequences; it grew
//! linearly, 64 µs per request at 2048, before `next` and `reap` stopped
//! scanning every place and sequence).
//!
//! Run: `cargo bench --bench sequence_bookkeeping`.

use std::time::{Duration, Instant};

use trtis::core::scheduler::sequence::{Next, SeqConfig, Sequences, Strategy};

fn run(sequences: u64, requests: u64) -> Duration {
    let t0 = Instant::now();
    let config = SeqConfig {
        strategy: Strategy::Oldest,
        instances: 2,
        places: (sequences as usize).div_ceil(2).max(1),
        max_batch: 8,
        preferred: vec![8],
        max_queue_delay: Duration::ZERO,
        min_slot_utilization: 0.0,
        idle: Duration::from_secs(10),
    };
    let mut s: Sequences<u64, u64> = Sequences::new(config);
    let any = |_: (&u64, u64), _: (&u64, u64)| true;
    let step = |s: &mut Sequences<u64, u64>| {
        for i in 0..2 {
            if let Next::Run(b) = s.next(i, t0, any) {
                let serials: Vec<u64> = b.rows.iter().flatten().map(|r| r.serial).collect();
                s.finished(i, &serials, t0);
            }
        }
    };
    for id in 1..=sequences {
        s.submit(id, true, false, id, t0).unwrap();
    }
    while s.queued() > 0 {
        step(&mut s);
    }
    let start = Instant::now();
    for k in 0..requests {
        let id = 1 + (k * 7919) % sequences;
        s.submit(id, false, false, k, t0).unwrap();
        let _ = s.reap(t0);
        let _ = s.next_idle();
        step(&mut s);
    }
    start.elapsed() / requests as u32
}

fn main() {
    let requests = 200_000u64;
    let reference = run(16, requests);
    println!("   16 live sequences: {reference:?} per request (the reference)");
    for n in [256u64, 2048, 8192] {
        let per = run(n, requests);
        println!(
            "{n:>5} live sequences: {per:?} per request ({:.2}x the reference)",
            per.as_secs_f64() / reference.as_secs_f64().max(1e-12)
        );
    }
}
