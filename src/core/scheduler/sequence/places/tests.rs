//! Unit tests of the sequence bookkeeping: pure state, times passed in.

use super::*;

fn direct(instances: usize, slots: usize) -> SeqConfig {
    SeqConfig {
        strategy: Strategy::Direct,
        instances,
        places: slots,
        max_batch: slots,
        preferred: vec![],
        max_queue_delay: Duration::ZERO,
        min_slot_utilization: 0.0,
        idle: Duration::from_secs(1),
    }
}

fn oldest(instances: usize, candidates: usize, max_batch: usize) -> SeqConfig {
    SeqConfig {
        strategy: Strategy::Oldest,
        places: candidates,
        max_batch,
        ..direct(instances, 1)
    }
}

fn any(_: (&i32, u64), _: (&i32, u64)) -> bool {
    true
}

/// The requests in a batch's rows (None: an empty slot).
fn rows(next: Next<i32>) -> Vec<Option<i32>> {
    match next {
        Next::Run(b) => b
            .rows
            .into_iter()
            .map(|r| r.map(|r| r.entry.request))
            .collect(),
        other => panic!("expected a batch, got {other:?}"),
    }
}

#[test]
fn direct_slots_follow_the_seed_timeline() {
    // One instance with two slots (the seed's START/READY figure).
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 2));
    s.submit(1, true, false, 10, t0).unwrap();
    assert_eq!(s.place_of(&1), Some((0, 0)));
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(10)]);
    // Busy: nothing more until finished.
    s.submit(1, false, false, 11, t0).unwrap();
    assert!(matches!(s.next(0, t0, any), Next::Nothing));
    s.submit(2, true, false, 20, t0).unwrap();
    assert_eq!(s.place_of(&2), Some((0, 1)));
    s.finished(0, &[1], t0);
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(11), Some(20)]);
    s.finished(0, &[1, 2], t0);
    // Only slot 1 has a request: slot 0 is an empty row.
    s.submit(2, false, false, 21, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![None, Some(21)]);
}

#[test]
fn backlog_takes_the_place_freed_by_end_in_order() {
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 1));
    s.submit(1, true, false, 10, t0).unwrap();
    s.submit(2, true, false, 20, t0).unwrap();
    s.submit(3, true, false, 30, t0).unwrap();
    assert_eq!(s.backlog_len(), 2);
    assert_eq!(s.place_of(&2), None);
    // A backlogged sequence's requests wait with it.
    s.submit(2, false, false, 21, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(10)]);
    s.finished(0, &[1], t0);
    s.submit(1, false, true, 11, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(11)]);
    // END taken: the place went to sequence 2, the oldest backlogged.
    assert_eq!(s.place_of(&2), Some((0, 0)));
    assert_eq!(s.backlog_len(), 1);
    s.finished(0, &[1], t0);
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(20)]);
    s.finished(0, &[2], t0);
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(21)]);
    assert_eq!(s.place_of(&3), None);
    s.finished(0, &[2], t0);
    s.submit(2, false, true, 22, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(22)]);
    assert_eq!(s.place_of(&3), Some((0, 0)));
}

#[test]
fn places_freed_together_go_to_the_backlog_lowest_slot_first() {
    // Four slots; sequence 5 waits in the backlog. The four ENDs arrive
    // last slot first and are batched together: the backlog gets slot 0,
    // as in Triton, so its batches are of size 1 (no empty rows before).
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 4));
    for id in 1..=5 {
        s.submit(id, true, false, id as i32 * 10, t0).unwrap();
    }
    assert_eq!(s.place_of(&5), None);
    assert_eq!(rows(s.next(0, t0, any)).len(), 4);
    s.finished(0, &[1, 2, 3, 4], t0);
    for (k, id) in [4u64, 3, 2, 1].into_iter().enumerate() {
        let t = t0 + Duration::from_millis(k as u64);
        s.submit(id, false, true, id as i32 * 10 + 1, t).unwrap();
    }
    assert_eq!(rows(s.next(0, t0 + Duration::from_millis(9), any)).len(), 4);
    assert_eq!(s.place_of(&5), Some((0, 0)));
}

#[test]
fn requests_after_end_or_without_start_are_refused() {
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 2));
    assert_eq!(
        s.submit(7, false, false, 1, t0).unwrap_err().0,
        Refusal::NoStart
    );
    s.submit(7, true, true, 1, t0).unwrap();
    assert_eq!(
        s.submit(7, false, false, 2, t0).unwrap_err().0,
        Refusal::NoStart
    );
    // A new START with the same id is a new sequence in another slot
    // (the ended one still holds its slot until its END is taken).
    s.submit(7, true, false, 3, t0).unwrap();
    assert_eq!(s.place_of(&7), Some((0, 1)));
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(1), Some(3)]);
}

#[test]
fn sequences_spread_over_instances() {
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(2, 2));
    for id in 1..=4 {
        s.submit(id, true, false, id as i32, t0).unwrap();
    }
    assert_eq!(s.place_of(&1), Some((0, 0)));
    assert_eq!(s.place_of(&2), Some((1, 0)));
    assert_eq!(s.place_of(&3), Some((0, 1)));
    assert_eq!(s.place_of(&4), Some((1, 1)));
    assert_eq!(rows(s.next(1, t0, any)), vec![Some(2), Some(4)]);
}

#[test]
fn a_new_sequence_prefers_an_instance_that_is_not_running() {
    let t0 = Instant::now();
    for config in [direct(2, 1), oldest(2, 2, 2)] {
        let mut s: Sequences<u64, i32> = Sequences::new(config);
        // Sequence 1 (START and END) runs on instance 0 and frees its
        // place at once; sequence 2 goes to idle instance 1.
        s.submit(1, true, true, 10, t0).unwrap();
        assert_eq!(rows(s.next(0, t0, any)), vec![Some(10)]);
        s.submit(2, true, false, 20, t0).unwrap();
        assert_eq!(s.place_of(&2), Some((1, 0)));
    }
}

#[test]
fn backlogged_sequences_give_up_at_their_deadline() {
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 1));
    s.submit(1, true, false, 10, t0).unwrap();
    let b = s.submit(2, true, false, 20, t0).unwrap();
    s.submit(2, false, false, 21, t0).unwrap();
    let c = s.submit(3, true, false, 30, t0).unwrap();
    s.set_backlog_deadline(b, ms(100));
    s.set_backlog_deadline(b, ms(50)); // the earliest counts
                                       // A sequence with a place has no backlog deadline.
    s.set_backlog_deadline(s.serial_of(&1).unwrap(), ms(1));
    assert_eq!(s.next_backlog_deadline(), Some(ms(50)));
    assert!(s.expire_backlog(ms(49)).is_empty());
    assert_eq!(s.expire_backlog(ms(50)), vec![20, 21]);
    assert_eq!(s.queued(), 2);
    assert_eq!(
        s.submit(2, false, false, 22, t0).unwrap_err().0,
        Refusal::NoStart
    );
    // Sequence 3 got no deadline: it still waits, and takes the place.
    s.set_backlog_deadline(c, ms(500));
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(10)]);
    s.finished(0, &[1], t0);
    s.submit(1, false, true, 11, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(11)]);
    assert_eq!(s.place_of(&3), Some((0, 0)));
    assert_eq!(
        s.next_backlog_deadline(),
        None,
        "its deadline went with the backlog"
    );
}

#[test]
fn idle_sequences_lose_their_place_on_a_paused_clock() {
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 1));
    s.submit(1, true, false, 10, t0).unwrap();
    s.submit(2, true, false, 20, t0).unwrap();
    let _ = rows(s.next(0, t0, any));
    // Running: never idle, however long it takes.
    assert!(s.reap(t0 + Duration::from_secs(5)).is_empty());
    let t1 = t0 + Duration::from_millis(10);
    s.finished(0, &[1], t1);
    // Idle from its arrival (t0), not from its completion.
    assert_eq!(s.next_idle(), Some(t0 + Duration::from_secs(1)));
    assert!(s.reap(t0 + Duration::from_millis(999)).is_empty());
    let serial = s.serial_of(&1).unwrap();
    assert_eq!(s.reap(t0 + Duration::from_secs(1)), vec![(serial, 1)]);
    // Its id is gone, its place went to the backlog.
    assert_eq!(
        s.submit(1, false, false, 11, t1).unwrap_err().0,
        Refusal::NoStart
    );
    assert_eq!(s.place_of(&2), Some((0, 0)));
    // The backlogged sequence's idle clock ran from its arrival (t0), as
    // Triton's: once its queued request ran, it is idle after the grace.
    let t2 = t1 + Duration::from_secs(1);
    assert_eq!(rows(s.next(0, t2, any)), vec![Some(20)]);
    let serial2 = s.serial_of(&2).unwrap();
    s.finished(0, &[serial2], t2);
    assert_eq!(s.next_idle(), Some(t2 + REAP_GRACE));
    assert!(s
        .reap(t2 + REAP_GRACE - Duration::from_millis(1))
        .is_empty());
    assert_eq!(s.reap(t2 + REAP_GRACE), vec![(serial2, 2)]);
}

#[test]
fn direct_minimum_slot_utilization_waits_up_to_the_delay() {
    let t0 = Instant::now();
    let mut config = direct(1, 4);
    config.min_slot_utilization = 0.5;
    config.max_queue_delay = Duration::from_millis(5);
    let mut s: Sequences<u64, i32> = Sequences::new(config);
    s.submit(1, true, false, 10, t0).unwrap();
    match s.next(0, t0, any) {
        Next::WaitUntil(at) => assert_eq!(at, t0 + Duration::from_millis(5)),
        other => panic!("{other:?}"),
    }
    // Two of four slots: enough.
    s.submit(2, true, false, 20, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(10), Some(20)]);
    s.finished(0, &[1, 2], t0);
    s.submit(1, false, false, 11, t0).unwrap();
    // Alone, it goes once it has waited the delay.
    assert_eq!(
        rows(s.next(0, t0 + Duration::from_millis(5), any)),
        vec![Some(11)]
    );
}

#[test]
fn oldest_batches_one_request_per_sequence_oldest_first() {
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let mut s: Sequences<u64, i32> = Sequences::new(oldest(1, 4, 2));
    // Sequence 1 has two requests ready; only its first joins a batch.
    s.submit(1, true, false, 10, ms(0)).unwrap();
    s.submit(1, false, false, 11, ms(1)).unwrap();
    s.submit(2, true, false, 20, ms(2)).unwrap();
    s.submit(3, true, false, 30, ms(3)).unwrap();
    assert_eq!(rows(s.next(0, ms(3), any)), vec![Some(10), Some(20)]);
    s.finished(0, &[1, 2], ms(4));
    assert_eq!(rows(s.next(0, ms(4), any)), vec![Some(11), Some(30)]);
    // A fifth sequence waits for a candidate place.
    s.submit(4, true, false, 40, ms(5)).unwrap();
    s.submit(5, true, false, 50, ms(5)).unwrap();
    assert_eq!(s.backlog_len(), 1);
}

#[test]
fn oldest_waits_for_a_preferred_size_up_to_the_delay() {
    let t0 = Instant::now();
    let mut config = oldest(1, 4, 4);
    config.preferred = vec![2, 4];
    config.max_queue_delay = Duration::from_millis(3);
    let mut s: Sequences<u64, i32> = Sequences::new(config);
    s.submit(1, true, false, 10, t0).unwrap();
    assert!(matches!(s.next(0, t0, any), Next::WaitUntil(_)));
    s.submit(2, true, false, 20, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(10), Some(20)]);
    s.finished(0, &[1, 2], t0);
    s.submit(3, true, false, 30, t0).unwrap();
    assert!(matches!(s.next(0, t0, any), Next::WaitUntil(_)));
    assert_eq!(
        rows(s.next(0, t0 + Duration::from_millis(3), any)),
        vec![Some(30)]
    );
}

#[test]
fn oldest_sends_the_largest_preferred_size_that_formed() {
    let t0 = Instant::now();
    let mut config = oldest(1, 8, 4);
    config.preferred = vec![2];
    let mut s: Sequences<u64, i32> = Sequences::new(config);
    for id in 1..=3 {
        s.submit(id, true, false, id as i32, t0).unwrap();
    }
    // Three ready, preferred 2: two go, the third next.
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(1), Some(2)]);
    s.finished(0, &[], t0);
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(3)]);
}

#[test]
fn incompatible_requests_wait_for_another_batch() {
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 3));
    let same_parity = |a: (&i32, u64), b: (&i32, u64)| a.0 % 2 == b.0 % 2 && a.1 == b.1;
    s.submit(1, true, false, 1, t0).unwrap();
    s.submit(2, true, false, 2, t0 + Duration::from_millis(1))
        .unwrap();
    s.submit(3, true, false, 3, t0 + Duration::from_millis(2))
        .unwrap();
    assert_eq!(
        rows(s.next(0, t0, same_parity)),
        vec![Some(1), None, Some(3)]
    );
    s.finished(0, &[], t0);
    assert_eq!(rows(s.next(0, t0, same_parity)), vec![None, Some(2)]);
    // Shape keys: a non-START request carries its sequence's key.
    s.finished(0, &[], t0);
    let (a, b) = (s.serial_of(&1).unwrap(), s.serial_of(&3).unwrap());
    s.set_shape_key(a, 5);
    s.set_shape_key(b, 6);
    s.submit(1, false, false, 11, t0).unwrap();
    s.submit(3, false, false, 13, t0 + Duration::from_millis(1))
        .unwrap();
    // The batch spans the slots with a request ready (Triton's direct
    // batcher): slot 2's request of another shape is padded over.
    assert_eq!(rows(s.next(0, t0, same_parity)), vec![Some(11), None, None]);
    s.finished(0, &[], t0);
    assert_eq!(rows(s.next(0, t0, same_parity)), vec![None, None, Some(13)]);
}

#[test]
fn queued_counts_follow_submits_takes_and_removals() {
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 1));
    s.submit(1, true, false, 1, t0).unwrap();
    s.submit(1, false, false, 2, t0).unwrap();
    s.submit(2, true, false, 3, t0).unwrap();
    assert_eq!(s.queued(), 3);
    let _ = rows(s.next(0, t0, any));
    assert_eq!(s.queued(), 2);
    // Sequence 1 ends; its remaining request and sequence 2's run.
    s.finished(0, &[1], t0);
    let _ = rows(s.next(0, t0, any));
    s.finished(0, &[1], t0);
    assert_eq!(s.queued(), 1);
    // Idle: sequence 1 goes, sequence 2 takes the slot and runs.
    assert_eq!(s.reap(t0 + Duration::from_secs(1)).len(), 1);
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(3)]);
    assert_eq!(s.queued(), 0);
    s.submit(2, false, false, 4, t0).unwrap();
    s.submit(5, true, false, 5, t0).unwrap();
    assert_eq!(s.drain().len(), 2);
    assert_eq!((s.queued(), s.sequences(), s.backlog_len()), (0, 0, 0));
    assert_eq!(
        s.submit(2, false, false, 6, t0).unwrap_err().0,
        Refusal::NoStart
    );
}

#[test]
fn a_requeued_request_keeps_its_place_until_the_sequence_ends() {
    // One place: sequence 1 runs, is requeued (an iterative sequence's
    // rescheduled request), runs again; sequence 2 waits in the backlog
    // until `end` frees the place.
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 1));
    let one = s.submit(1, true, false, 10, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(10)]);
    s.submit(2, true, false, 20, t0).unwrap();
    assert_eq!(s.place_of(&2), None, "backlogged");
    s.requeue(one, 11, t0).unwrap();
    s.finished(0, &[one], t0);
    match s.next(0, t0, any) {
        Next::Run(b) => {
            let row = b.rows[0].as_ref().unwrap();
            assert_eq!(row.entry.request, 11);
            assert!(!row.entry.start && !row.entry.end, "neither START nor END");
        }
        other => panic!("expected a batch, got {other:?}"),
    }
    s.finished(0, &[one], t0);
    s.end(one);
    assert!(!s.alive(one));
    assert_eq!(
        s.place_of(&2),
        Some((0, 0)),
        "the place went to the backlog"
    );
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(20)]);
    // A gone sequence gives the request back.
    assert_eq!(s.requeue(one, 12, t0), Err(12));
}

#[test]
fn ending_a_sequence_with_requests_queued_ends_it_after_the_last() {
    let t0 = Instant::now();
    let mut s: Sequences<u64, i32> = Sequences::new(direct(1, 1));
    let one = s.submit(1, true, false, 10, t0).unwrap();
    assert_eq!(rows(s.next(0, t0, any)), vec![Some(10)]);
    s.submit(1, false, false, 11, t0).unwrap();
    s.finished(0, &[one], t0);
    s.end(one);
    assert_eq!(s.serial_of(&1), None, "the id is forgotten at once");
    assert!(s.alive(one));
    match s.next(0, t0, any) {
        Next::Run(b) => assert!(
            b.rows[0].as_ref().unwrap().entry.end,
            "the last one ends it"
        ),
        other => panic!("expected a batch, got {other:?}"),
    }
    assert!(!s.alive(one));
}
