//! The mailbox's own tests: claims and warm rings, slots round the ring,
//! spanning messages, what a producer reads of its owner and prefetches,
//! lengths a consumer refuses, stale files.

use super::*;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 77)), port)
}

/// A mailbox of `geo` at port `me` (user id `uid_base` plus a bit of
/// the pid), and a producer at port `from` whose claim it has seen.
/// Each test has a user id base, or a port, of its own: the tests run in
/// parallel, and one that rewrote the file at another's path (a stale
/// mailbox's test does) would cut it short under the other's mapping,
/// whose next access is a SIGBUS.
fn claimed_pair(uid_base: u32, me: u16, from: u16, geo: Geometry) -> (Mailbox, Outbox) {
    let uid = uid_base + std::process::id() % 1000;
    let mut mb = Mailbox::create(uid, &addr(me), geo, 0).unwrap();
    let ob = Outbox::connect(uid, &addr(me), &addr(from)).unwrap().unwrap();
    let mut new = Vec::new();
    mb.scan_claims(&mut new);
    assert_eq!(new.len(), 1);
    (mb, ob)
}

/// A mailbox at port `me` (user id 4 000 000 000 plus a bit of the pid)
/// of `nrings` rings of 64 slots of a page each; its user id and
/// address too.
fn page_slot_mailbox(me: u16, nrings: usize) -> (u32, SocketAddr, Mailbox) {
    let uid = 4_000_000_000 + std::process::id() % 1000;
    let me = addr(me);
    let mb = Mailbox::create(uid, &me, Geometry::new(nrings, 64, PAGE - SLOT_HDR), 0).unwrap();
    (uid, me, mb)
}

/// A slot header with its first two field bytes set.
fn head(kind: u8, len: usize, f01: [u8; 2]) -> SlotHead {
    let mut f = [0u8; 32];
    f[..2].copy_from_slice(&f01);
    f[31] = kind ^ 0x5a;
    SlotHead {
        kind,
        len,
        f: Fields::from_bytes(f),
    }
}

/// A claim maps a ring's first pages at once and leaves the rest to
/// the first lap or to `warm`; a freed ring is not warmed.
#[test]
fn claimed_rings_map_their_first_pages_and_warm_the_rest() {
    // Slots of a page each: 64 of them after the ring's header.
    let (uid, me, mut mb) = page_slot_mailbox(11, 2);
    let geo = mb.geo;
    let mut ob = Outbox::connect(uid, &me, &addr(12)).unwrap().unwrap();
    let mut new = Vec::new();
    mb.scan_claims(&mut new);
    assert_eq!(new, vec![0]);
    let ring_pages = (RING_HDR + 64 * geo.slot_size).div_ceil(PAGE);
    let cold = |mb: &Mailbox| mb.cold.iter().map(|c| (c.2 - c.1).div_ceil(PAGE)).sum::<usize>();
    assert_eq!(cold(&mb), ring_pages - WARM_FIRST_PAGES);
    // Messages flow past the mapped pages, each faulting its own in.
    for i in 0..10u8 {
        let mut s = ob.slot().unwrap();
        s.head(&head(1, 1, [i, 0]));
        s.payload(1)[0] = i;
        s.publish();
        let (s, h) = mb.peek(0).unwrap();
        assert_eq!(h, head(1, 1, [i, 0]));
        assert_eq!(mb.payload(&s).unwrap().to_vec(), &[i]);
        mb.release(s);
    }
    mb.warm();
    assert_eq!(cold(&mb), 0);
    // A second claim, freed before it was warmed: dropped from the list.
    let _ob2 = Outbox::connect(uid, &me, &addr(13)).unwrap().unwrap();
    let mut new = Vec::new();
    mb.scan_claims(&mut new);
    assert_eq!(new, vec![1]);
    assert!(cold(&mb) > 0);
    mb.free_ring(1);
    assert_eq!(cold(&mb), 0);
}

#[test]
fn the_spare_rings_are_the_next_claimed_and_come_warm() {
    let (uid, me, mut mb) = page_slot_mailbox(21, 4);
    mb.warm_spares(1);
    assert_eq!(mb.spares, vec![0], "the lowest free ring");
    mb.warm_spares(0);
    assert_eq!(mb.spares, vec![0], "no peer more, no spare more");
    let _ob = Outbox::connect(uid, &me, &addr(22)).unwrap().unwrap();
    let mut new = Vec::new();
    mb.scan_claims(&mut new);
    assert_eq!(new, vec![0]);
    assert!(mb.cold.is_empty(), "nothing left to fault in");
    assert!(mb.spares.is_empty());
    // Two peers more: rings 1 and 2, which they claim.
    mb.warm_spares(2);
    assert_eq!(mb.spares, vec![1, 2]);
    let _ob2 = Outbox::connect(uid, &me, &addr(23)).unwrap().unwrap();
    let _ob3 = Outbox::connect(uid, &me, &addr(24)).unwrap().unwrap();
    mb.scan_claims(&mut new);
    assert_eq!(new, vec![0, 1, 2]);
    assert!(mb.cold.is_empty());
    // A ring claimed while it was not a spare is mapped as before.
    let _ob4 = Outbox::connect(uid, &me, &addr(25)).unwrap().unwrap();
    mb.scan_claims(&mut new);
    assert_eq!(new, vec![0, 1, 2, 3]);
    assert_eq!(mb.cold.len(), 1);
    // No free ring: nothing to warm.
    mb.warm_spares(1);
    assert!(mb.spares.is_empty());
}

/// A producer holds the owner's word of its ring for the 10-20 us it
/// takes to fault the ring in, before it announces the claim: the spare
/// is that ring, not the free one above it.
#[test]
fn a_claim_not_yet_announced_is_the_spare() {
    let (uid, me, mut mb) = page_slot_mailbox(31, 3);
    // A producer has taken ring 0's owner word and is faulting it in.
    let owner = |mb: &Mailbox, pid: u64| mb.map.u64_at(OWNERS_OFF).store(pid, Ordering::Release);
    owner(&mb, u64::from(std::process::id()));
    let mut new = Vec::new();
    mb.scan_claims(&mut new);
    assert!(new.is_empty(), "not announced yet");
    mb.warm_spares(1);
    assert_eq!(mb.spares, vec![0], "the ring being claimed");
    // Its claim completes (here: made again from the start, as a
    // producer that finds ring 0 free does).
    owner(&mb, 0);
    let _ob = Outbox::connect(uid, &me, &addr(32)).unwrap().unwrap();
    mb.scan_claims(&mut new);
    assert_eq!(new, vec![0]);
    assert!(mb.cold.is_empty(), "its pages came warm");
}

#[test]
fn ring_round_trip_and_wraparound() {
    let uid = 4_000_000_000 + std::process::id() % 1000;
    let me = addr(1);
    let mut mb = Mailbox::create(uid, &me, Geometry::new(2, 4, 128), 0).unwrap();
    let mut ob = Outbox::connect(uid, &me, &addr(2)).unwrap().unwrap();
    let mut new = Vec::new();
    mb.scan_claims(&mut new);
    assert_eq!(new, vec![0]);
    assert_eq!(mb.rings[0].unwrap().peer, addr(2));
    for round in 0..10u8 {
        for i in 0..4u8 {
            let mut s = ob.slot().expect("a free slot");
            s.head(&head(1, 3, [round, i]));
            s.payload(3).copy_from_slice(&[i, round, 9]);
            assert!(!s.publish());
        }
        assert!(ob.slot().is_none(), "ring of 4 is full");
        for i in 0..4u8 {
            assert!(mb.ready(0), "ready agrees with peek");
            let (s, h) = mb.peek(0).unwrap();
            assert_eq!(h, head(1, 3, [round, i]));
            assert_eq!(mb.payload(&s).unwrap().to_vec(), &[i, round, 9]);
            mb.release(s);
        }
        assert!(mb.peek(0).is_none());
        assert!(!mb.ready(0));
    }
    // Sleeping consumer: the next publish asks for one doorbell.
    assert!(mb.arm(&[0]));
    let s = ob.slot().unwrap();
    assert!(s.publish());
    assert!(!mb.arm(&[0]), "a slot is waiting");
    drop(ob);
    let (s, _) = mb.peek(0).unwrap();
    mb.release(s);
    assert!(mb.ring_closed(0));
    mb.free_ring(0);
    // The ring can be claimed again.
    let _ob2 = Outbox::connect(uid, &me, &addr(3)).unwrap().unwrap();
    let mut new = Vec::new();
    mb.scan_claims(&mut new);
    assert_eq!(new, vec![0]);
    let path = mb.path().to_string();
    drop(mb);
    assert!(std::fs::metadata(&path).is_err(), "mailbox removed on close");
}

/// Messages spanning slots: a payload runs on over the slots after
/// the first (into the overflow room where the ring wraps) and comes
/// out whole; a sender waits until all the slots it needs are back,
/// and lap after lap every length lands where the consumer looks.
#[test]
fn spanning_messages_round_trip_across_the_ring_end() {
    let geo = Geometry::new(1, 8, 128).with_span(3);
    assert_eq!((geo.slot_size, geo.msg_max()), (192, 3 * 192 - SLOT_HDR));
    let (mut mb, mut ob) = claimed_pair(4_210_000_000, 7, 8, geo);
    assert_eq!(ob.geometry().span, 3, "the producer reads the span from the header");
    assert!(ob.slot_for(geo.msg_max() + 1).is_none(), "longer than a message may be");
    // 1, 3, 2, 1, 3, ... slots: starts fall on every slot, and three
    // slot messages start in the last two, running into the overflow.
    let lens = [100, geo.msg_max(), 200, 0, 400];
    let body = |n: usize, len: usize| (0..len).map(|i| (i * 7 + n) as u8).collect::<Vec<u8>>();
    let mut sent = 0;
    let mut got = 0;
    while got < 200 {
        // Fill what the ring takes, then take it all out.
        loop {
            let len = lens[sent % lens.len()];
            let Some(mut s) = ob.slot_for(len) else { break };
            s.head(&head(1, len, [sent as u8, 0]));
            s.payload(len).copy_from_slice(&body(sent, len));
            s.publish();
            sent += 1;
        }
        assert!(!ob.has_room(lens[sent % lens.len()]));
        assert!(sent > got, "an empty ring has room for any message");
        while let Some((s, h)) = mb.peek(0) {
            let len = lens[got % lens.len()];
            assert_eq!(h, head(1, len, [got as u8, 0]));
            assert_eq!(mb.payload(&s).unwrap().to_vec(), body(got, len), "message {got}");
            mb.release(s);
            got += 1;
        }
        assert_eq!(got, sent);
    }
}

/// A spanning payload that carries, where the second slot's sequence
/// word sits, the value that slot is published with a lap later: the
/// consumer overwrites it when it hands the slots back, so the next
/// lap does not read it as a message. The producer learns what was
/// handed back from the ring's head (delivery completion).
#[test]
fn spanning_payload_is_not_read_as_a_later_lap() {
    let geo = Geometry::new(1, 4, 128).with_span(2);
    let (mut mb, mut ob) = claimed_pair(4_250_000_000, 14, 15, geo);
    // Position 5 is slot 1 on the second lap, published as 6.
    let len = geo.slot_size;
    let mut body = vec![0u8; len];
    let at = geo.slot_size - SLOT_HDR;
    body[at..at + 8].copy_from_slice(&6u64.to_le_bytes());
    let mut s = ob.slot_for(len).unwrap();
    s.head(&head(1, len, [0, 0]));
    s.payload(len).copy_from_slice(&body);
    s.publish();
    let (s, _) = mb.peek(0).unwrap();
    assert_eq!(mb.payload(&s).unwrap().to_vec(), body);
    assert!(!ob.consumed(0));
    mb.release(s);
    assert!(ob.consumed(0) && ob.consumed(1) && !ob.consumed(2));
    // Positions 2, 3 and 4 (slots 2, 3, 0), then nothing at 5.
    for i in 2..5u8 {
        let mut s = ob.slot().unwrap();
        s.head(&head(1, 0, [i, 0]));
        s.publish();
        let (s, h) = mb.peek(0).unwrap();
        assert_eq!(h.f.to_bytes()[0], i);
        mb.release(s);
    }
    assert!(mb.peek(0).is_none(), "a payload byte read as a message");
    assert!(ob.consumed(4) && !ob.consumed(5));
}

#[test]
fn the_owners_copy_limit_reaches_its_producers() {
    let (mb, ob) = claimed_pair(4_260_000_000, 21, 22, Geometry::new(2, 8, 256));
    assert_eq!(ob.copy_max(), 0, "not said: pull what spans slots");
    mb.set_copy_max(512);
    assert_eq!(ob.copy_max(), 512);
    mb.set_copy_max(usize::MAX);
    assert_eq!(ob.copy_max(), usize::MAX);
    mb.set_copy_max(0);
    assert_eq!(ob.copy_max(), 1, "said, never read as not said");
}

/// The lines a producer fetches ahead after a send (`prefetch_body`) are
/// those of the slot the next message will take that no message has
/// written in that slot: from the second line (the consumer polls the
/// first) to where a message as long ends, at most a page. Each slot
/// keeps its own count, so a slot that only ever held short messages is
/// cold however far others reached. None for a message that would span
/// slots, nor while the head the producer last read does not show the
/// slot free.
#[test]
fn a_producer_fetches_ahead_the_next_slots_lines_no_message_wrote_there() {
    let geo = Geometry::new(1, 4, 256);
    assert_eq!(geo.payload(), 272);
    let (mut mb, mut ob) = claimed_pair(4_270_000_000, 31, 32, geo);
    // Sends as the wire does (`Exec::body_ahead`: past the first line).
    let send = |ob: &mut Outbox, len: usize| {
        let mut s = ob.slot_for(len).expect("a free slot");
        s.head(&head(1, len, [0, 0]));
        s.payload(len).fill(7);
        s.publish();
        if len > LINE_PAYLOAD {
            ob.prefetch_body(len);
        }
    };
    let take = |mb: &mut Mailbox| {
        let (s, _) = mb.peek(0).unwrap();
        let off = s.off;
        mb.release(s);
        off
    };
    send(&mut ob, 8); // slot 0
    assert_eq!(ob.body_lines(8).count(), 0, "nothing past the first line");
    send(&mut ob, 200); // slot 1
    let ahead: Vec<usize> = ob.body_lines(200).collect();
    let s0 = take(&mut mb);
    take(&mut mb);
    send(&mut ob, 8); // slot 2, the one `ahead` was for
    let s2 = take(&mut mb);
    assert_eq!(ahead, vec![s2 + 64, s2 + 128, s2 + 192], "to byte 48 + 200");
    assert_eq!(ob.body_lines(100).count(), 2, "a shorter one");
    send(&mut ob, 272); // slot 3, all of it
    take(&mut mb);
    assert_eq!(ob.body_lines(272).count(), 0, "the head last read shows slot 0 taken");
    assert!(ob.has_room(8)); // reads the head afresh
    assert_eq!(
        ob.body_lines(272).collect::<Vec<_>>(),
        vec![s0 + 64, s0 + 128, s0 + 192, s0 + 256],
        "slot 0 only ever held 8 bytes, however far slot 3 reached"
    );
    assert_eq!(ob.body_lines(300).count(), 0, "a message that would span two slots");
    send(&mut ob, 8); // slot 0
    take(&mut mb);
    assert_eq!(
        ob.body_lines(272).collect::<Vec<_>>(),
        vec![s0 + geo.slot_size + 256],
        "slot 1 held 200 bytes: only the line past them"
    );
    send(&mut ob, 8); // slot 1
    send(&mut ob, 8); // slot 2
    take(&mut mb);
    take(&mut mb);
    assert_eq!(ob.body_lines(272).count(), 0, "slot 3 has held one as long");

    // The last head read shows the next slot taken: nothing.
    let (_mb2, mut ob2) = claimed_pair(4_280_000_000, 33, 34, geo);
    for _ in 0..3 {
        send(&mut ob2, 8);
    }
    send(&mut ob2, 100);
    assert_eq!(ob2.body_lines(100).count(), 0, "not known free");

    let (_mb3, mut ob3) = claimed_pair(4_290_000_000, 35, 36, Geometry::new(1, 4, 8192));
    send(&mut ob3, 8192);
    assert_eq!(ob3.body_lines(8192).count(), 4096 / 64 - 1, "a page at most");
}

/// A message that spans slots counts, in each, the bytes it wrote there;
/// one that runs on into the overflow slots counts none in the ring's
/// first slot, which its second position only wraps onto.
#[test]
fn a_spanning_message_counts_what_it_wrote_in_each_slot() {
    let geo = Geometry::new(1, 4, 256).with_span(2);
    let (mut mb, mut ob) = claimed_pair(4_230_000_000, 37, 38, geo);
    let mut send = |ob: &mut Outbox, len: usize| {
        let mut s = ob.slot_for(len).expect("free slots");
        s.head(&head(1, len, [0, 0]));
        s.payload(len).fill(7);
        s.publish();
        let (s, _) = mb.peek(0).unwrap();
        let off = s.off;
        mb.release(s);
        off
    };
    let s0 = send(&mut ob, 8); // position 0: slot 0
    send(&mut ob, 8);
    send(&mut ob, 8);
    // 48 + 400 bytes from position 3: slot 3 and the overflow slot behind
    // the ring; position 4 wraps onto slot 0.
    send(&mut ob, 400);
    for _ in 0..3 {
        send(&mut ob, 8); // slots 1, 2, 3
    }
    assert!(ob.has_room(8));
    assert_eq!(
        ob.body_lines(272).collect::<Vec<_>>(),
        vec![s0 + 64, s0 + 128, s0 + 192, s0 + 256],
        "slot 0 holds no more than its first line"
    );
    // From position 8: all of slot 0 (320 bytes) and 128 of slot 1.
    send(&mut ob, 400);
    send(&mut ob, 8); // slot 2
    send(&mut ob, 8); // slot 3
    assert!(ob.has_room(8));
    assert_eq!(ob.body_lines(272).count(), 0, "slot 0 was written whole");
    send(&mut ob, 8); // slot 0
    assert!(ob.has_room(8));
    assert_eq!(ob.body_lines(80).count(), 0, "slot 1 holds 48 + 80 bytes");
    let s1 = s0 + geo.slot_size;
    assert_eq!(
        ob.body_lines(272).collect::<Vec<_>>(),
        vec![s1 + 128, s1 + 192, s1 + 256]
    );
}

#[test]
fn garbage_length_is_rejected() {
    let uid = 4_100_000_000 + std::process::id() % 1000;
    let me = addr(5);
    let mut mb = Mailbox::create(uid, &me, Geometry::new(1, 2, 64), 0).unwrap();
    let mut ob = Outbox::connect(uid, &me, &addr(6)).unwrap().unwrap();
    let mut s = ob.slot().unwrap();
    s.head(&head(1, 0, [0, 0]));
    // A producer that lies about the length.
    s.set_len(u32::MAX as usize);
    s.publish();
    let mut new = Vec::new();
    mb.scan_claims(&mut new);
    let (s, _) = mb.peek(0).unwrap();
    assert!(mb.payload(&s).is_none());
}

/// With spans, a length up to the longest message is given its
/// payload in one piece and one byte more is refused; either way the
/// consumer moves on by the slots it counted from the length, so a
/// producer that lies about it only garbles its own ring.
#[test]
fn spanning_length_beyond_the_longest_message_is_rejected() {
    let geo = Geometry::new(1, 8, 128).with_span(2);
    let (mut mb, mut ob) = claimed_pair(4_150_000_000, 9, 10, geo);
    // A one-slot frame whose header claims `len` bytes.
    let mut lie = |len: usize, tag: u8| {
        let mut s = ob.slot_for(0).unwrap();
        s.head(&head(1, 0, [tag, 0]));
        s.set_len(len);
        s.publish();
    };
    lie(geo.msg_max() + 1, 0);
    let (s, _) = mb.peek(0).unwrap();
    assert!(mb.payload(&s).is_none(), "longer than any message");
    mb.release(s);
    lie(geo.msg_max(), 1);
    let (s, h) = mb.peek(0).unwrap();
    assert_eq!((h.len, h.f.to_bytes()[0]), (geo.msg_max(), 1));
    assert_eq!(mb.payload(&s).map(|p| p.len()), Some(geo.msg_max()));
    mb.release(s);
    // The consumer is at position 3 now, the producer at 2: what it
    // publishes at 2 is not read, the next one is.
    lie(0, 2);
    assert!(mb.peek(0).is_none());
    lie(0, 3);
    let (_, h) = mb.peek(0).unwrap();
    assert_eq!(h.f.to_bytes()[0], 3);
}

#[test]
fn stale_mailbox_of_dead_process_is_reclaimed() {
    let uid = 4_200_000_000 + std::process::id() % 1000;
    let me = addr(7);
    let path = path_for(uid, &me);
    // A leftover whose owner pid does not exist.
    let mut h = vec![0u8; 4096];
    h[24..28].copy_from_slice(&(i32::MAX as u32 - 1).to_le_bytes());
    std::fs::write(&path, &h).unwrap();
    let mb = Mailbox::create(uid, &me, Geometry::new(1, 2, 64), 0).unwrap();
    assert!(Outbox::connect(uid, &me, &addr(8)).unwrap().is_some());
    drop(mb);
    assert!(Outbox::connect(uid, &me, &addr(8)).unwrap().is_none());
}

#[test]
fn a_mailbox_of_another_pid_namespace_is_neither_reclaimed_nor_used() {
    use std::os::unix::fs::FileExt;
    assert_ne!(pid_ns(), 0, "/proc/self/ns/pid readable");
    let foreign = (pid_ns() ^ 1).to_le_bytes();
    let uid = 4_200_000_000 + std::process::id() % 1000 + 1000;
    let me = addr(9);
    let path = path_for(uid, &me);
    // A file whose owner pid does not exist here, written from another
    // pid namespace (where it may well run): not ours to remove.
    let mut h = vec![0u8; 4096];
    h[24..28].copy_from_slice(&(i32::MAX as u32 - 1).to_le_bytes());
    h[PID_NS_OFF..PID_NS_OFF + 8].copy_from_slice(&foreign);
    std::fs::write(&path, &h).unwrap();
    assert!(!Mailbox::reclaim(&path));
    assert!(std::path::Path::new(&path).exists());
    assert!(Mailbox::create(uid, &me, Geometry::new(1, 2, 64), 0).is_err());
    // The same from our namespace is a leftover, and goes.
    h[PID_NS_OFF..PID_NS_OFF + 8].copy_from_slice(&pid_ns().to_le_bytes());
    std::fs::write(&path, &h).unwrap();
    let mb = Mailbox::create(uid, &me, Geometry::new(3, 2, 64), 0).unwrap();
    assert!(Outbox::connect(uid, &me, &addr(10)).unwrap().is_some());
    // A live mailbox that says it is of another pid namespace: its pids
    // are not ours, so no producer here claims a ring in it.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&foreign, PID_NS_OFF as u64).unwrap();
    assert!(Outbox::connect(uid, &me, &addr(11)).unwrap().is_none());
    f.write_all_at(&pid_ns().to_le_bytes(), PID_NS_OFF as u64).unwrap();
    assert!(Outbox::connect(uid, &me, &addr(11)).unwrap().is_some());
    drop(mb);
}
