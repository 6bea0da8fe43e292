//! The CQ's tests: ordering, errors, the handoff, blocking reads and
//! wait objects.

use super::*;
use crate::wait::testutil::*;
use std::ffi::CStr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

fn cq(format: fi_cq_format, wait_obj: fi_wait_obj, size: usize) -> Arc<Cq> {
    let cfg = CqConfig {
        size,
        format,
        wait_obj,
        wait_cond: FI_CQ_COND_NONE,
    };
    Cq::new(cfg, std::ptr::null_mut(), None, None).unwrap()
}
fn ok(ctx: usize) -> CqEntry {
    CqEntry {
        op_context: ctx as *mut c_void,
        flags: FI_RECV,
        len: ctx * 10,
        data: ctx as u64 + 1,
        tag: ctx as u64 + 2,
        src: ctx as u64 + 3,
        ..Default::default()
    }
}
fn err(ctx: usize, data: &[u8]) -> CqError {
    CqError {
        entry: ok(ctx),
        err: FI_ETRUNC,
        prov_errno: FI_ETRUNC,
        olen: 7,
        err_data: data.to_vec(),
    }
}
/// Reads up to `n` CONTEXT-format entries; returns the contexts or the error.
fn read_ctx(cq: &Cq, n: usize) -> Result<Vec<usize>, isize> {
    let mut out = vec![0u8; n * 8];
    let r = cq.read(&mut out, n, None);
    if r < 0 {
        return Err(r);
    }
    Ok(out
        .chunks(8)
        .take(r as usize)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()) as usize)
        .collect())
}
const EAGAIN: isize = -FI_EAGAIN as isize;
const EAVAIL: isize = -FI_EAVAIL as isize;

/// A fake endpoint bound to `cq` whose `n`th pass (from 1) runs
/// `pass(cq, n)`; its `calls` count the passes. `unbind` lets it go.
fn bound_source(cq: &Arc<Cq>, pass: impl Fn(&Arc<Cq>, usize) + Send + Sync + 'static) -> Arc<FakeSrc> {
    let wcq = Arc::downgrade(cq);
    let src = Arc::new(FakeSrc::new(move |s| {
        pass(&wcq.upgrade().unwrap(), s.calls.load(SeqCst))
    }));
    let weak: Weak<dyn Progress> = Arc::downgrade(&src) as Weak<FakeSrc>;
    cq.add_source(weak);
    src
}

fn unbind(cq: &Cq, src: &Arc<FakeSrc>) {
    let weak: Weak<dyn Progress> = Arc::downgrade(src) as Weak<FakeSrc>;
    cq.remove_source(&weak);
}

/// A read's own progress pass hands its completions straight back, up
/// to what the read takes; the rest, and everything after an error,
/// queue behind them in order; other CQs' completions queue as usual.
#[test]
fn a_reads_own_pass_hands_back_in_order() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 16);
    let other = Arc::new(Cq::new(CqConfig::default(), std::ptr::null_mut(), None, None).unwrap());
    let (wcq, wother) = (Arc::downgrade(&cq), Arc::downgrade(&other));
    let src: Arc<dyn Progress> = Arc::new(FakeSrc::new(move |s| {
        let (cq, other) = (wcq.upgrade().unwrap(), wother.upgrade().unwrap());
        match s.calls.load(SeqCst) {
            1 => {
                cq.push(ok(1));
                other.push(ok(50));
                cq.push(ok(2));
                cq.push(ok(3));
            }
            2 => {
                cq.push(ok(4));
                cq.push_err(err(5, b""));
                cq.push(ok(6));
            }
            _ => {}
        }
    }));
    cq.add_source(Arc::downgrade(&src));
    assert_eq!(read_ctx(&cq, 2), Ok(vec![1, 2]), "pass 1: two handed back");
    assert_eq!(read_ctx(&other, 10), Ok(vec![50]), "another CQ's entry queued there");
    assert_eq!(read_ctx(&cq, 10), Ok(vec![3]), "the one that did not fit was queued");
    assert_eq!(read_ctx(&cq, 10), Ok(vec![4]), "pass 2: handed back up to the error");
    assert_eq!(read_ctx(&cq, 10), Err(EAVAIL));
    assert_eq!(cq.readerr(None).unwrap().op_context as usize, 5);
    assert_eq!(read_ctx(&cq, 10), Ok(vec![6]), "after the error: queued behind it");
    assert_eq!(read_ctx(&cq, 10), Err(EAGAIN));
    cq.remove_source(&Arc::downgrade(&src));
}

/// A pass that makes more completions than the handoff holds (a
/// shm receive batch is up to 32 messages; Open MPI reads 100 at a
/// time): the handoff's worth goes to the queue first, the rest
/// behind it, and the read takes them all in order. A pass of one
/// hands back that one.
#[test]
fn a_pass_longer_than_the_handoff_queues_the_rest_in_order() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 16);
    let src = bound_source(&cq, |cq, pass| match pass {
        1 => (1..=HANDOFF + 5).for_each(|i| cq.push(ok(i))),
        2 => cq.push(ok(100)),
        _ => {}
    });
    let all: Vec<usize> = (1..=HANDOFF + 5).collect();
    assert_eq!(read_ctx(&cq, 100), Ok(all), "all of them, in order");
    assert_eq!(read_ctx(&cq, 100), Err(EAGAIN), "the read after makes no pass");
    assert_eq!(read_ctx(&cq, 100), Ok(vec![100]), "a pass of one");
    assert_eq!(read_ctx(&cq, 100), Err(EAGAIN));
    unbind(&cq, &src);
}

/// The read after one whose pass found completions makes no pass
/// (Open MPI's read until empty, before it answers): it still returns
/// what is queued, and it is only the one read; a read that took
/// queued entries, or found nothing, leaves the next one its pass.
#[test]
fn the_read_after_a_pass_that_found_completions_makes_none() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 16);
    let src = bound_source(&cq, |cq, pass| {
        if pass == 1 || pass == 3 {
            cq.push(ok(pass));
        }
    });
    let passes = || src.calls.load(SeqCst);
    assert_eq!(read_ctx(&cq, 4), Ok(vec![1]));
    assert_eq!((read_ctx(&cq, 4), passes()), (Err(EAGAIN), 1), "no pass");
    assert_eq!((read_ctx(&cq, 4), passes()), (Err(EAGAIN), 2), "a pass again");
    assert_eq!((read_ctx(&cq, 4), passes()), (Ok(vec![3]), 3));
    cq.push(ok(7));
    assert_eq!((read_ctx(&cq, 4), passes()), (Ok(vec![7]), 3), "queued: taken, no pass");
    assert_eq!((read_ctx(&cq, 4), passes()), (Err(EAGAIN), 4), "after a take: a pass");
    unbind(&cq, &src);
}

/// Another thread queues for the CQ while a read's pass runs (the
/// progress thread's pass ended just before ours began, with older
/// completions): the pass's own go behind them, not ahead. Found by
/// tests/incast.rs on CI (a receiver read 34 messages out of order).
#[test]
fn another_threads_completions_during_a_pass_keep_their_place() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 16);
    let src = bound_source(&cq, |cq, pass| {
        if pass == 1 {
            let other = cq.clone();
            std::thread::spawn(move || (1..=3).for_each(|i| other.push(ok(i))))
                .join()
                .unwrap();
            cq.push(ok(4));
            cq.push(ok(5));
        }
    });
    assert_eq!(read_ctx(&cq, 10), Ok(vec![1, 2, 3, 4, 5]));
    assert_eq!(read_ctx(&cq, 10), Err(EAGAIN));
    unbind(&cq, &src);
}

#[test]
fn errors_are_delivered_in_order_among_successes() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 16);
    cq.push(ok(1));
    cq.push(ok(2));
    cq.push_err(err(3, b""));
    cq.push(ok(4));
    cq.push_err(err(5, b""));
    assert_eq!(read_ctx(&cq, 10), Ok(vec![1, 2]));
    assert_eq!(read_ctx(&cq, 10), Err(EAVAIL));
    assert_eq!(read_ctx(&cq, 10), Err(EAVAIL), "stays EAVAIL until readerr");
    assert_eq!(cq.readerr(None).unwrap().op_context as usize, 3);
    assert_eq!(read_ctx(&cq, 10), Ok(vec![4]));
    assert_eq!(read_ctx(&cq, 10), Err(EAVAIL));
    assert_eq!(cq.readerr(None).unwrap().op_context as usize, 5);
    assert_eq!(read_ctx(&cq, 10), Err(EAGAIN));
    assert_eq!(cq.readerr(None).unwrap_err(), -FI_EAGAIN);
}

#[test]
fn readerr_takes_the_oldest_error_even_behind_successes() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 16);
    cq.push(ok(1));
    cq.push_err(err(2, b""));
    assert_eq!(cq.readerr(None).unwrap().op_context as usize, 2);
    assert_eq!(read_ctx(&cq, 10), Ok(vec![1]));
}

#[test]
fn overflow_past_size_loses_nothing() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 4);
    for i in 1..=1000 {
        cq.push(ok(i));
    }
    let mut got = Vec::new();
    while let Ok(v) = read_ctx(&cq, 7) {
        got.extend(v);
    }
    assert_eq!(got, (1..=1000).collect::<Vec<_>>());
}

#[test]
fn formats_write_their_prefix_only() {
    for (fmt, sz) in [
        (FI_CQ_FORMAT_UNSPEC, 8),
        (FI_CQ_FORMAT_CONTEXT, 8),
        (FI_CQ_FORMAT_MSG, 24),
        (FI_CQ_FORMAT_DATA, 40),
        (FI_CQ_FORMAT_TAGGED, 48),
    ] {
        let cq = cq(fmt, FI_WAIT_NONE, 0);
        assert_eq!(cq.entry_size, sz);
        cq.push(ok(5));
        cq.push(ok(6));
        let mut out = vec![0xAAu8; 2 * 48];
        let mut src = [0u64; 2];
        assert_eq!(cq.read(&mut out, 2, Some(&mut src)), 2);
        assert_eq!(src, [8, 9]);
        let words: Vec<u64> = out
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        let want5 = [5u64, FI_RECV, 50, 0, 6, 7];
        let want6 = [6u64, FI_RECV, 60, 0, 7, 8];
        let n = sz / 8;
        assert_eq!(&words[..n], &want5[..n], "format {fmt}");
        assert_eq!(&words[n..2 * n], &want6[..n], "format {fmt}");
        assert!(
            out[2 * sz..].iter().all(|&b| b == 0xAA),
            "format {fmt} wrote past its entries"
        );
    }
}

/// Reads of every format and many counts take entries from wherever the
/// queue's ring holds them (across its wrap, in two pieces) in order,
/// with their sources, and write nothing past what they return.
#[test]
fn reads_take_entries_across_the_queues_wrap_in_every_format() {
    for (fmt, sz) in [
        (FI_CQ_FORMAT_CONTEXT, 8),
        (FI_CQ_FORMAT_MSG, 24),
        (FI_CQ_FORMAT_DATA, 40),
        (FI_CQ_FORMAT_TAGGED, 48),
    ] {
        let cq = cq(fmt, FI_WAIT_NONE, 8);
        let (mut pushed, mut read) = (0usize, 0usize);
        for round in 0..40 {
            for _ in 0..(round * 5 % 7 + 1) {
                pushed += 1;
                cq.push(ok(pushed));
            }
            let want = round * 3 % 9 + 1;
            let mut out = vec![0xAAu8; 10 * 48];
            let mut src = [0u64; 10];
            let r = cq.read(&mut out, want, Some(&mut src));
            let n = if r == EAGAIN { 0 } else { r as usize };
            assert_eq!(n, want.min(pushed - read), "format {fmt}, round {round}");
            for (i, e) in out.chunks(sz).take(n).enumerate() {
                let c = read + i + 1;
                let words: Vec<u64> = e.chunks(8).map(|w| u64::from_ne_bytes(w.try_into().unwrap())).collect();
                let want = [c as u64, FI_RECV, c as u64 * 10, 0, c as u64 + 1, c as u64 + 2];
                assert_eq!(words, want[..sz / 8], "format {fmt}, entry {c}");
                assert_eq!(src[i], c as u64 + 3, "format {fmt}, entry {c}'s source");
            }
            assert!(
                out[n * sz..].iter().all(|&b| b == 0xAA),
                "format {fmt} wrote past its entries"
            );
            read += n;
        }
    }
}

/// A send that completed in the application's call queues its entry
/// (its context and flags, nothing else) in order with the others.
#[test]
fn a_completion_made_in_the_call_queues_in_order() {
    let cq = cq(FI_CQ_FORMAT_TAGGED, FI_WAIT_NONE, 8);
    cq.push(ok(1));
    cq.push_op_in_call(2, FI_SEND | FI_TAGGED);
    cq.push_op(3, FI_SEND | FI_MSG);
    let mut out = vec![0u8; 3 * 48];
    let mut src = [0u64; 3];
    assert_eq!(cq.read(&mut out, 3, Some(&mut src)), 3);
    let words: Vec<u64> = out
        .chunks(8)
        .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
        .collect();
    assert_eq!(&words[..6], &[1, FI_RECV, 10, 0, 2, 3]);
    assert_eq!(&words[6..12], &[2, FI_SEND | FI_TAGGED, 0, 0, 0, 0]);
    assert_eq!(&words[12..], &[3, FI_SEND | FI_MSG, 0, 0, 0, 0]);
    assert_eq!(src, [4, FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL]);
}

#[test]
fn readerr_err_data_rules() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 0);
    cq.push_err(err(1, b"0123456789"));
    cq.push_err(err(2, b"abcdef"));
    cq.push_err(err(3, b""));
    // Application buffer smaller than the data: truncated copy.
    let mut mine = [0u8; 4];
    let e = cq.readerr(Some(&mut mine)).unwrap();
    assert_eq!((e.err, e.prov_errno, e.olen, e.len), (FI_ETRUNC, FI_ETRUNC, 7, 10));
    assert_eq!(e.err_data_size, 4);
    assert_eq!(e.err_data as *const u8, mine.as_ptr());
    assert_eq!(&mine, b"0123");
    // No application buffer: a provider buffer with all of it.
    let e = cq.readerr(None).unwrap();
    assert_eq!(e.err_data_size, 6);
    // SAFETY: valid until the next readerr, which comes after this read.
    let got = unsafe { std::slice::from_raw_parts(e.err_data as *const u8, 6) };
    assert_eq!(got, b"abcdef");
    // Nothing to give.
    let e = cq.readerr(None).unwrap();
    assert_eq!((e.err_data_size, e.err_data), (0, std::ptr::null_mut()));
}

#[test]
fn empty_read_progresses_sources_once_and_rechecks() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 0);
    let weak_cq = Arc::downgrade(&cq);
    let src: Arc<dyn Progress> = Arc::new(FakeSrc::new(move |s| {
        if s.calls.load(SeqCst) == 2 {
            weak_cq.upgrade().unwrap().push(ok(42));
        }
    }));
    cq.add_source(Arc::downgrade(&src));
    assert_eq!(read_ctx(&cq, 1), Err(EAGAIN)); // progress call 1
    assert_eq!(read_ctx(&cq, 1), Ok(vec![42])); // call 2 pushes, re-check finds it
    cq.push(ok(1));
    assert_eq!(read_ctx(&cq, 1), Ok(vec![1])); // fast path: no progress
    assert_eq!(cq.sources.snapshot().len(), 1);
    cq.remove_source(&Arc::downgrade(&src));
    assert_eq!(read_ctx(&cq, 1), Err(EAGAIN));
    assert_eq!(cq.read(&mut [], 0, None), EAGAIN);
}

/// The CQ's wait object, where a blocked sread sleeps.
fn wobj(cq: &Cq) -> &crate::wait::WaitObj {
    cq.wait.own().expect("a CQ with its own wait object")
}

/// A blocking read of `cq` slept (one to three times: a signal may cut a
/// sleep short) and progressed `fake` at most once more than it slept,
/// before and after each sleep: it did not spin over the source.
fn assert_slept_not_spun(cq: &Cq, fake: &FakeSrc) {
    let (sleeps, calls) = (wobj(cq).sleeps(), fake.calls.load(SeqCst));
    assert!(
        (1..=3).contains(&sleeps) && calls <= sleeps + 1,
        "{sleeps} sleeps, {calls} progress calls: spinning"
    );
}

/// A reader blocked in fi_cq_sread without a timeout (so that only a
/// wake-up ends it) on another thread, once it sleeps in the CQ's wait
/// object: (what sread returned, the first entry's context).
fn sleeping_reader(cq: &Arc<Cq>) -> std::thread::JoinHandle<(isize, u64)> {
    let c2 = cq.clone();
    let reader = std::thread::spawn(move || {
        let mut out = [0u8; 8];
        let r = c2.sread(&mut out, 1, None, 1, -1);
        (r, u64::from_ne_bytes(out))
    });
    wait_until("the reader sleeps in the CQ's wait object", || wobj(cq).asleep() == 1);
    reader
}

#[test]
fn sread_times_out_without_spinning() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC, 0);
    let fake = Arc::new(FakeSrc::new(|_| {}));
    let src: Arc<dyn Progress> = fake.clone();
    cq.add_source(Arc::downgrade(&src));
    let mut out = [0u8; 8];
    let t0 = Instant::now();
    assert_eq!(cq.sread(&mut out, 1, None, 1, 200), EAGAIN);
    assert!(t0.elapsed() >= Duration::from_millis(200), "{:?}", t0.elapsed());
    // Slept through the timeout instead of polling the source: one
    // sleep (a signal could interrupt it), progress before and after.
    assert_slept_not_spun(&cq, &fake);
}

#[test]
fn signal_before_sread_is_not_lost() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC, 0);
    assert_eq!(cq.signal(), 0);
    assert_eq!(cq.sread(&mut [0u8; 8], 1, None, 1, HANG_MS), EAGAIN);
    assert_eq!(wobj(&cq).sleeps(), 0, "the pending signal was not seen before sleeping");
    // Consumed: the next sread sleeps until its timeout.
    let t1 = Instant::now();
    assert_eq!(cq.sread(&mut [0u8; 8], 1, None, 1, 100), EAGAIN);
    assert!(t1.elapsed() >= Duration::from_millis(100));
    assert!(wobj(&cq).sleeps() >= 1);
}

#[test]
fn sread_on_wait_none_is_enosys() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 0);
    assert_eq!(cq.sread(&mut [0u8; 8], 1, None, 1, 0), -FI_ENOSYS as isize);
    assert_eq!(cq.trywait(), -FI_EINVAL);
}

#[test]
fn sread_wakes_on_push_from_another_thread() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD, 0);
    let reader = sleeping_reader(&cq);
    cq.push(ok(9));
    assert_eq!(join_within(reader, "the push woke the reader"), (1, 9));
}

#[test]
fn sread_sleeps_until_the_source_deadline() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC, 0);
    let wcq = Arc::downgrade(&cq);
    // The source has work only once its timer expires (30 ms from now).
    let fake = Arc::new(FakeSrc::new(move |s| {
        let d = *s.deadline.lock().unwrap();
        if d.is_some_and(|d| crate::progress::now_ns() >= d) {
            *s.deadline.lock().unwrap() = None;
            wcq.upgrade().unwrap().push(ok(77));
        }
    }));
    *fake.deadline.lock().unwrap() = Some(crate::progress::now_ns() + 30_000_000);
    let src: Arc<dyn Progress> = fake.clone();
    cq.add_source(Arc::downgrade(&src));
    let mut out = [0u8; 8];
    assert_eq!(cq.sread(&mut out, 1, None, 1, -1), 1);
    assert_eq!(u64::from_ne_bytes(out), 77);
    // It slept until the source's deadline, then progressed it: a few
    // rounds, not a spin over the source until the timer expired.
    assert_slept_not_spun(&cq, &fake);
}

#[test]
fn sread_wakes_on_source_fd() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC, 0);
    let (r, w) = pipe();
    let rfd = r.as_raw_fd();
    let wcq = Arc::downgrade(&cq);
    let mut fake = FakeSrc::new(move |_| {
        if read_all(rfd) {
            wcq.upgrade().unwrap().push(ok(5));
        }
    });
    fake.fds.push(rfd);
    let src: Arc<dyn Progress> = Arc::new(fake);
    cq.add_source(Arc::downgrade(&src));
    // Nobody pushes: the source's descriptor becoming readable is what
    // must wake the reader, so that it progresses the source.
    let reader = sleeping_reader(&cq);
    write_byte(&w);
    assert_eq!(join_within(reader, "the source's descriptor woke the reader"), (1, 5));
    drop((r, w));
}

#[test]
fn signal_unblocks_sread_with_eagain() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC, 0);
    let reader = sleeping_reader(&cq);
    assert_eq!(cq.signal(), 0);
    assert_eq!(join_within(reader, "fi_cq_signal woke the reader").0, EAGAIN);
}

#[test]
fn sread_threshold_waits_for_enough_entries() {
    let cfg = CqConfig {
        size: 0,
        format: FI_CQ_FORMAT_CONTEXT,
        wait_obj: FI_WAIT_UNSPEC,
        wait_cond: FI_CQ_COND_THRESHOLD,
    };
    let cq = Cq::new(cfg, std::ptr::null_mut(), None, None).unwrap();
    // One entry per sleep of the reader: each of the first two wakes it,
    // and it must go back to sleep below the threshold.
    let c2 = cq.clone();
    let mut slept = wobj(&cq).sleeps();
    let t = std::thread::spawn(move || {
        for i in 0..3 {
            wait_until("the reader sleeps again", || {
                wobj(&c2).asleep() == 1 && wobj(&c2).sleeps() > slept
            });
            slept = wobj(&c2).sleeps();
            c2.push(ok(i));
        }
    });
    let mut out = [0u8; 8 * 8];
    assert_eq!(cq.sread(&mut out, 8, None, 3, HANG_MS), 3);
    join_within(t, "the pusher is done");
    // Threshold not reachable before the timeout: returns what is there.
    cq.push(ok(1));
    assert_eq!(cq.sread(&mut out, 8, None, 3, 30), 1);
    // An error behind the ready entries ends the wait without a sleep.
    cq.push(ok(1));
    cq.push_err(err(2, b""));
    let slept = wobj(&cq).sleeps();
    assert_eq!(cq.sread(&mut out, 8, None, 3, HANG_MS), 1);
    assert_eq!(cq.sread(&mut out, 8, None, 3, HANG_MS), EAVAIL);
    assert_eq!(wobj(&cq).sleeps(), slept);
}

#[test]
fn many_readers_many_pushers_lose_nothing() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC, 8);
    const N: usize = 20_000;
    let total = Arc::new(AtomicU64::new(0));
    let sum = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (cq, total, sum) = (cq.clone(), total.clone(), sum.clone());
            std::thread::spawn(move || {
                let mut out = [0u8; 8 * 4];
                while total.load(SeqCst) < N as u64 {
                    let r = cq.sread(&mut out, 4, None, 1, 50);
                    if r > 0 {
                        for c in out.chunks(8).take(r as usize) {
                            sum.fetch_add(u64::from_ne_bytes(c.try_into().unwrap()), SeqCst);
                        }
                        total.fetch_add(r as u64, SeqCst);
                    }
                }
            })
        })
        .collect();
    let pushers: Vec<_> = (0..2)
        .map(|p| {
            let cq = cq.clone();
            std::thread::spawn(move || {
                for i in 0..N / 2 {
                    cq.push(ok(p * N / 2 + i + 1));
                    if i % 1000 == 0 {
                        // let the readers drain and sleep now and then
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for t in pushers.into_iter().chain(readers) {
        t.join().unwrap();
    }
    assert_eq!(total.load(SeqCst), N as u64);
    assert_eq!(sum.load(SeqCst), (N * (N + 1) / 2) as u64);
}

/// Infinite-timeout readers: a lost wake-up leaves entries unread while
/// every reader sleeps, which the deadline below catches.
#[test]
fn no_lost_wakeups_with_blocking_readers() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_UNSPEC, 8);
    const N: u64 = 20_000;
    let total = Arc::new(AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (cq, total, done) = (cq.clone(), total.clone(), done.clone());
            std::thread::spawn(move || {
                let mut out = [0u8; 8 * 3];
                while !done.load(SeqCst) {
                    let r = cq.sread(&mut out, 3, None, 1, -1);
                    if r > 0 {
                        total.fetch_add(r as u64, SeqCst);
                    }
                }
            })
        })
        .collect();
    for i in 0..N {
        cq.push(ok(i as usize));
        if i % 64 == 0 {
            std::thread::yield_now();
        }
    }
    wait_until("every entry is read (a lost wake-up leaves some behind)", || {
        total.load(SeqCst) >= N
    });
    let got = total.load(SeqCst);
    done.store(true, SeqCst);
    for t in readers {
        // A reader may be between its check of `done` and its sleep:
        // signal until it has left.
        wait_until("every reader has stopped", || {
            cq.signal();
            t.is_finished()
        });
        t.join().unwrap();
    }
    assert_eq!(got, N, "entries left unread while readers slept");
}

#[test]
fn getwait_fd_and_trywait() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD, 0);
    let p = into_fid(cq.clone());
    let mut fd: i32 = -1;
    // SAFETY: p is a live fid_cq we created; fd is an int slot.
    unsafe {
        let ops = &*(*p).fid.ops;
        assert_eq!(
            ops.control.unwrap()(p as *mut fid, FI_GETWAIT as i32, &mut fd as *mut i32 as *mut c_void),
            0
        );
        let mut wo: fi_wait_obj = 0;
        assert_eq!(
            ops.control.unwrap()(p as *mut fid, FI_GETWAITOBJ as i32, &mut wo as *mut _ as *mut c_void),
            0
        );
        assert_eq!(wo, FI_WAIT_FD);
    }
    assert!(fd >= 0);
    let mut fids = [p as *mut fid];
    // SAFETY: one valid fid pointer.
    assert_eq!(unsafe { crate::wait::trywait(fids.as_mut_ptr(), 1) }, 0);
    assert!(!fd_readable(fd));
    cq.push(ok(1));
    assert!(fd_readable(fd), "a push after trywait must make the fd readable");
    assert_eq!(unsafe { crate::wait::trywait(fids.as_mut_ptr(), 1) }, -FI_EAGAIN);
    assert_eq!(read_ctx(&cq, 1), Ok(vec![1]));
    assert_eq!(unsafe { crate::wait::trywait(fids.as_mut_ptr(), 1) }, 0);
    assert!(!fd_readable(fd));
    // SAFETY: closing our own fid once.
    unsafe {
        cq.refs.get();
        assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), -FI_EBUSY);
        cq.refs.put();
        assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), 0);
    }
}

#[test]
fn trywait_arms_the_timer_at_the_source_deadline() {
    let cq = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_FD, 0);
    let fake = Arc::new(FakeSrc::new(|_| {}));
    let deadline = crate::progress::now_ns() + 20_000_000;
    *fake.deadline.lock().unwrap() = Some(deadline);
    let src: Arc<dyn Progress> = fake.clone();
    cq.add_source(Arc::downgrade(&src));
    assert_eq!(cq.trywait(), 0);
    let fd = cq.wait.own().unwrap().fd();
    assert!(!fd_readable(fd));
    // The application sleeps on the descriptor (bounded by HANG); the
    // timer makes it readable, and not before the source's deadline.
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, HANG_MS) },
        1,
        "the fd must fire when the source needs progress"
    );
    assert!(
        crate::progress::now_ns() >= deadline,
        "the fd fired before the source's deadline"
    );
}

#[test]
fn c_shims_read_readerr_and_bad_input() {
    let cq = cq(FI_CQ_FORMAT_TAGGED, FI_WAIT_NONE, 0);
    let p = into_fid(cq.clone());
    // SAFETY: p is a live fid_cq; buffers are sized per the API.
    unsafe {
        let ops = &*(*p).ops;
        let mut e: [fi_cq_tagged_entry; 2] = std::mem::zeroed();
        assert_eq!(ops.read.unwrap()(p, std::ptr::null_mut(), 1), -FI_EINVAL as isize);
        assert_eq!(ops.read.unwrap()(p, e.as_mut_ptr() as *mut c_void, 2), EAGAIN);
        cq.push(ok(3));
        cq.push_err(err(4, b"xyz"));
        let mut src = [0u64; 2];
        assert_eq!(
            ops.readfrom.unwrap()(p, e.as_mut_ptr() as *mut c_void, 2, src.as_mut_ptr()),
            1
        );
        assert_eq!(
            (e[0].op_context as usize, e[0].len, e[0].data, e[0].tag, src[0]),
            (3, 30, 4, 5, 6)
        );
        assert_eq!(ops.read.unwrap()(p, e.as_mut_ptr() as *mut c_void, 2), EAVAIL);
        let mut ee: fi_cq_err_entry = std::mem::zeroed();
        assert_eq!(ops.readerr.unwrap()(p, &mut ee, 1), -FI_EINVAL as isize);
        assert_eq!(ops.readerr.unwrap()(p, &mut ee, 0), 1);
        assert_eq!((ee.op_context as usize, ee.err, ee.err_data_size), (4, FI_ETRUNC, 3));
        assert_eq!(ops.readerr.unwrap()(p, &mut ee, 0), EAGAIN);
        let mut buf = [0 as c_char; 64];
        let s = ops.strerror.unwrap()(p, FI_ETRUNC, std::ptr::null(), buf.as_mut_ptr(), buf.len());
        assert!(CStr::from_ptr(s).to_str().unwrap().contains("truncated"));
        let s = ops.strerror.unwrap()(p, 12345, std::ptr::null(), std::ptr::null_mut(), 0);
        assert!(!CStr::from_ptr(s).to_bytes().is_empty());
        assert_eq!(
            ops.sread.unwrap()(p, e.as_mut_ptr() as *mut c_void, 1, std::ptr::null(), 0),
            -FI_ENOSYS as isize
        );
        assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), 0);
    }
}

#[test]
fn bad_attrs_are_rejected() {
    let mk = |f: &dyn Fn(&mut fi_cq_attr)| {
        // SAFETY: a zeroed fi_cq_attr is a valid default attr.
        let mut a: fi_cq_attr = unsafe { std::mem::zeroed() };
        f(&mut a);
        // SAFETY: `a` is a readable attr.
        unsafe { parse_attr(&a) }.map(|(c, _)| c)
    };
    assert_eq!(mk(&|_| {}).unwrap().format, FI_CQ_FORMAT_UNSPEC);
    assert!(mk(&|a| a.flags = FI_AFFINITY).is_ok());
    assert_eq!(mk(&|a| a.flags = FI_SEND).unwrap_err(), -FI_EINVAL);
    assert_eq!(mk(&|a| a.format = 99).unwrap_err(), -FI_ENOSYS);
    assert_eq!(mk(&|a| a.wait_obj = FI_WAIT_MUTEX_COND).unwrap_err(), -FI_ENOSYS);
    assert_eq!(mk(&|a| a.wait_obj = FI_WAIT_SET).unwrap_err(), -FI_EINVAL);
    assert_eq!(
        mk(&|a| {
            a.wait_obj = FI_WAIT_FD;
            a.wait_cond = 9
        })
        .unwrap_err(),
        -FI_EINVAL
    );
    assert!(
        mk(&|a| a.wait_cond = 9).is_ok(),
        "wait_cond is ignored with FI_WAIT_NONE"
    );
}

/// A reader that finds nothing for long gives the CPU away now and then
/// (`Spin`, FI_GNIX_YIELD_AFTER_US); a read that finds a completion ends
/// the wait. The loop stops at the first yield, bounded in reads.
#[test]
fn a_long_run_of_empty_reads_yields_and_a_completion_ends_it() {
    let c = cq(FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE, 8);
    let mut reads = 0u64;
    while c.spin.yields() == 0 {
        assert_eq!(read_ctx(&c, 1), Err(-FI_EAGAIN as isize));
        reads += 1;
        assert!(reads < 1 << 32, "no yield after {} empty reads", reads);
    }
    // Yields come once in SPIN_LOOK_EVERY reads, not at every one.
    let y = c.spin.yields();
    for _ in 0..crate::progress::SPIN_LOOK_EVERY - 1 {
        assert_eq!(read_ctx(&c, 1), Err(-FI_EAGAIN as isize));
    }
    assert_eq!(c.spin.yields(), y);
    c.push(ok(7));
    assert_eq!(read_ctx(&c, 1), Ok(vec![7]));
    // A new wait starts afresh: its first look only notes the time,
    // unless the last yield let another thread run (in real time, on a
    // loaded machine it may have: then the CPU is shared, and the first
    // look yields, `Spin`).
    let shared = c.spin.shared();
    for _ in 0..crate::progress::SPIN_LOOK_EVERY {
        assert_eq!(read_ctx(&c, 1), Err(-FI_EAGAIN as isize));
    }
    assert_eq!(c.spin.yields(), y + u64::from(shared));
}
