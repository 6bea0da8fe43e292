//! Credit flow control for eager and unexpected traffic, after the GASNet
//! Portals conduit: the receive-side memory that eager messages may occupy
//! until the application takes them is divided into credits; every peer
//! holds a loan (at least `min_loan`), the rest waits in a bank. A sender
//! spends credits for each eager message and gets them back when the
//! receiver has handed the message to the application. A sender that runs
//! dry queues its messages and asks for more in its header; the receiver
//! lends from the bank, and when the bank runs low it asks peers that went
//! quiet (their usage decays every epoch) to give back what they hold
//! beyond the minimum.
//!
//! Everything that crosses the wire is cumulative (total granted, total
//! returned), so a lost, duplicated or reordered header loses nothing: the
//! next one says it all again. Both machines are sans-IO: the engine feeds
//! them what arrives and copies their fields into what it sends.
//!
//! One credit is `unit` bytes of payload; a message costs at least one
//! (`cost`), so ten thousand empty messages are bounded as well.

/// The credit byte of a header, `EQA.NNNN`:
/// E (0x80) the sender is stalled and wants 2^NNNN more credits;
/// Q (0x40) the receiver asks the sender to give back what it holds
/// unused beyond the minimum loan; A (0x20) all of it (another peer has
/// nothing at all).
pub const STALLED: u8 = 0x80;
pub const GIVE_BACK: u8 = 0x40;
pub const GIVE_ALL: u8 = 0x20;
const WANT_MASK: u8 = 0x0f;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreditConfig {
    /// Bytes per credit.
    pub unit: u32,
    /// Credits of the whole receive budget (bank plus every loan).
    pub total: u32,
    /// Credits every peer may keep; a new peer gets this much at once.
    pub min_loan: u32,
    /// Most credits one peer may hold.
    pub max_loan: u32,
    /// The bank is low below this many credits: revoke from quiet peers.
    pub low_water: u32,
    /// Length of a usage epoch; usage halves at every epoch boundary.
    pub epoch_ns: u64,
}

impl Default for CreditConfig {
    fn default() -> Self {
        CreditConfig {
            unit: 1024,
            total: 32 * 1024,   // 32 MiB of eager/unexpected payload
            min_loan: 256,      // 256 KiB per peer
            max_loan: 8 * 1024, // 8 MiB per peer
            low_water: 4 * 1024,
            epoch_ns: 10_000_000,
        }
    }
}

impl CreditConfig {
    /// Credits a message of `len` payload bytes costs.
    pub fn cost(&self, len: usize) -> u32 {
        (len.div_ceil(self.unit as usize).max(1)).min(u32::MAX as usize) as u32
    }
}

/// The receiving side's account of one peer.
#[derive(Clone, Debug, Default)]
pub struct Lender {
    /// Cumulative credits granted to the peer (its loan plus every credit
    /// given back after use).
    granted: u32,
    /// Credits the peer holds: unspent, in flight, or in our memory.
    loan: u32,
    /// Credits of messages of this peer we still hold (unexpected).
    held: u32,
    /// Cumulative credits the peer has given back (from its headers).
    returned: u32,
    /// Credits spent by the peer this epoch (halved at each epoch end).
    usage: u32,
    /// Asked to give back (GIVE_BACK, GIVE_ALL bits), until it does.
    give_back: u8,
    /// `granted` as last sent to the peer.
    announced: u32,
    /// The peer's last header said it is stalled.
    peer_stalled: bool,
    /// Stalled with no loan at all: others must give back for it.
    starving: bool,
    closed: bool,
}

/// The receive budget of one endpoint, shared by its peers.
#[derive(Clone, Debug)]
pub struct CreditBank {
    pub cfg: CreditConfig,
    bank: u32,
    epoch_end: u64,
    /// Peers stalled with no loan at all.
    starving: u32,
}

/// What became of an arriving message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    Ok,
    /// The peer sent more than its loan: a broken or hostile sender. The
    /// message is dropped (and counted) rather than let memory grow.
    OverLoan,
}

impl CreditBank {
    pub fn new(cfg: CreditConfig) -> CreditBank {
        CreditBank {
            bank: cfg.total,
            cfg,
            epoch_end: 0,
            starving: 0,
        }
    }

    #[cfg(test)]
    pub fn banked(&self) -> u32 {
        self.bank
    }

    /// A new peer. Its minimum loan waits for its first request: a
    /// connection request costs nothing to forge, and credits lent to a
    /// forged peer would never come back. A real peer's first message
    /// stalls once and asks (one round trip, usually overlapped with the
    /// handshake's).
    pub fn open(&mut self) -> Lender {
        Lender::default()
    }

    fn lend(&mut self, l: &mut Lender, n: u32) {
        self.bank -= n;
        l.loan += n;
        l.granted = l.granted.wrapping_add(n);
    }

    /// A peer went away and its account with it: all its credits come
    /// back (messages of it the application still holds are no longer
    /// counted; their release finds no account).
    pub fn close(&mut self, l: &mut Lender) {
        self.bank += l.loan;
        l.loan = 0;
        l.held = 0;
        l.closed = true;
        self.set_starving(l, false);
    }

    fn set_starving(&mut self, l: &mut Lender, s: bool) {
        if l.starving != s {
            l.starving = s;
            if s {
                self.starving += 1;
            } else {
                self.starving -= 1;
            }
        }
    }

    /// The credit fields of a datagram from the peer: `returned` is its
    /// cumulative give-back, `byte` its credit byte.
    pub fn on_header(&mut self, l: &mut Lender, returned: u32, byte: u8) {
        l.peer_stalled = byte & STALLED != 0;
        let back = returned.wrapping_sub(l.returned);
        // Only what the peer holds and has not spent can come back; a
        // larger claim is garbage (or a stale header) and is ignored.
        if back > 0 && back <= l.loan - l.held && back < u32::MAX / 2 {
            l.returned = returned;
            l.loan -= back;
            self.bank += back;
            l.give_back = 0;
        }
        if byte & STALLED != 0 && !l.closed {
            // At least the minimum loan (a peer's first request).
            let want = (1u32 << (byte & WANT_MASK)).max(self.cfg.min_loan.saturating_sub(l.loan));
            let room = self.cfg.max_loan.saturating_sub(l.loan);
            // Peers that have a loan leave a reserve for newcomers' minimum
            // loans; a peer with nothing takes what there is.
            let spare = if l.loan == 0 {
                self.bank
            } else {
                self.bank.saturating_sub(self.cfg.min_loan)
            };
            let g = want.min(room).min(spare);
            if g > 0 {
                self.lend(l, g);
            }
            self.set_starving(l, l.loan == 0);
        }
    }

    /// An eager message of `cost` credits arrived from the peer.
    pub fn on_arrival(&mut self, l: &mut Lender, cost: u32) -> Admit {
        if l.held + cost > l.loan {
            return Admit::OverLoan;
        }
        l.held += cost;
        l.usage = l.usage.saturating_add(cost);
        Admit::Ok
    }

    /// The application took a message of `cost` credits (matched, claimed
    /// or discarded): the peer may spend them again.
    pub fn on_freed(&mut self, l: &mut Lender, cost: u32) {
        let c = cost.min(l.held);
        l.held -= c;
        // A closed peer's credits go home; so do those of a peer above half
        // the minimum loan while another has none at all (it asks again
        // and gets them from the bank), so busy peers cannot starve one.
        if l.closed || (self.starving > 0 && !l.starving && l.loan > self.cfg.min_loan / 2) {
            l.loan -= c;
            self.bank += c;
        } else {
            l.granted = l.granted.wrapping_add(c);
        }
    }

    /// Fields for a datagram to the peer: cumulative grant and the
    /// give-back request bits.
    pub fn header(&self, l: &Lender) -> (u32, u8) {
        (l.granted, l.give_back)
    }

    /// Epoch boundary at `now`: usage decays, and with the bank low the
    /// quietest peers holding more than the minimum are asked to give back.
    /// Returns whether any peer's fields changed (send them an update).
    pub fn tick<'a>(&mut self, now: u64, lenders: impl Iterator<Item = &'a mut Lender>) -> bool {
        if now < self.epoch_end {
            return false;
        }
        self.epoch_end = now + self.cfg.epoch_ns;
        let low = self.bank < self.cfg.low_water;
        let starving = self.starving > 0;
        let mut changed = false;
        for l in lenders {
            let quiet = l.usage == 0;
            l.usage /= 2;
            if !quiet || l.closed || l.give_back != 0 {
                continue;
            }
            if starving && l.loan > l.held {
                l.give_back = GIVE_BACK | GIVE_ALL;
                changed = true;
            } else if low && l.loan > self.cfg.min_loan {
                l.give_back = GIVE_BACK;
                changed = true;
            }
        }
        changed
    }
}

impl Lender {
    /// The grant `granted` went out to the peer: its request is answered
    /// (if it is still stalled, it asks again).
    pub fn announced(&mut self, granted: u32) {
        self.announced = granted;
        self.peer_stalled = false;
    }
    /// Whether the peer should hear from us at once: it is stalled, or
    /// half its loan came free since we last said so.
    pub fn wants_news(&self) -> bool {
        let fresh = self.granted.wrapping_sub(self.announced);
        self.peer_stalled && fresh > 0 || fresh >= (self.loan / 2).max(1)
    }
    /// Whether the peer should hear from us soon: a quarter of its loan
    /// came free. News that is not urgent waits for something else going
    /// to the peer and follows it (`Vc::credit_news`), so a request and
    /// its answer do not each carry a CREDIT datagram ahead of them.
    pub fn has_news(&self) -> bool {
        let fresh = self.granted.wrapping_sub(self.announced);
        fresh >= (self.loan / 4).max(1)
    }
    pub fn asked_to_give_back(&self) -> bool {
        self.give_back != 0
    }
    /// Credits of this peer's messages we hold.
    #[cfg(test)]
    pub fn held(&self) -> u32 {
        self.held
    }
}

/// The sending side's account of one peer.
#[derive(Clone, Debug, Default)]
pub struct Borrower {
    /// Cumulative grant last heard from the peer.
    granted: u32,
    /// Cumulative credits spent and given back by us.
    spent: u32,
    returned: u32,
    /// Credits wanted by the message at the head of the queue, if stalled.
    want: u32,
    min_loan: u32,
    /// What the last stall asked for: each stall asks twice as much (a
    /// busy stream's loan grows like a congestion window, not by one
    /// message per round trip).
    ask: u32,
}

impl Borrower {
    pub fn new(min_loan: u32) -> Borrower {
        Borrower {
            min_loan,
            ..Borrower::default()
        }
    }

    /// Credits we may spend now.
    pub fn available(&self) -> u32 {
        let a = self.granted.wrapping_sub(self.spent).wrapping_sub(self.returned);
        // A stale grant (older than what we spent) reads as "nothing".
        if a > u32::MAX / 2 {
            0
        } else {
            a
        }
    }

    /// Spends `cost` credits for a message if we have them; otherwise
    /// remembers that we are stalled (the header asks for more).
    pub fn try_spend(&mut self, cost: u32) -> bool {
        if self.available() >= cost {
            self.spent = self.spent.wrapping_add(cost);
            self.want = 0;
            true
        } else {
            if self.want == 0 {
                let need = cost - self.available();
                self.ask = need.max(self.ask.saturating_mul(2)).min(1 << 15);
            }
            self.want = self.want.max(cost);
            false
        }
    }

    /// The peer's credit fields arrived.
    pub fn on_header(&mut self, granted: u32, byte: u8) {
        let newer = granted.wrapping_sub(self.granted);
        if newer < u32::MAX / 2 {
            self.granted = granted;
        }
        if byte & GIVE_BACK != 0 && self.want == 0 {
            // Quiet and asked: give back the rest, or all of it.
            let keep = if byte & GIVE_ALL != 0 { 0 } else { self.min_loan };
            let spare = self.available().saturating_sub(keep);
            self.returned = self.returned.wrapping_add(spare);
        }
    }

    /// Fields for a datagram to the peer: cumulative returns and the
    /// stalled request.
    pub fn header(&self) -> (u32, u8) {
        let byte = if self.want > 0 {
            let need = self.want.saturating_sub(self.available()).max(self.ask).max(1);
            let log = (32 - (need - 1).leading_zeros()).min(15) as u8;
            STALLED | log
        } else {
            0
        };
        (self.returned, byte)
    }

    pub fn stalled(&self) -> bool {
        self.want > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CreditConfig {
        CreditConfig {
            unit: 1024,
            total: 1000,
            min_loan: 10,
            max_loan: 400,
            low_water: 300,
            epoch_ns: 100,
        }
    }

    /// Deterministic loss: drop about one header in `every`.
    fn lost(k: usize, every: usize) -> bool {
        every != 0 && (k.wrapping_mul(0x9E37_79B9) >> 7).is_multiple_of(every)
    }

    /// One receiver, `n` senders; each step every sender tries to send one
    /// message of `cost`, the receiver frees what it holds with some
    /// delay, headers cross (optionally lost). Memory held never exceeds
    /// the budget, nobody deadlocks, and the bank balances.
    fn run(n: usize, cost: u32, lose_every: usize, steps: usize) {
        let c = cfg();
        let mut bank = CreditBank::new(c);
        let mut lenders: Vec<Lender> = (0..n).map(|_| bank.open()).collect();
        let mut borrowers: Vec<Borrower> = (0..n).map(|_| Borrower::new(c.min_loan)).collect();
        // The receiver's initial header to each sender.
        for (l, b) in lenders.iter().zip(borrowers.iter_mut()) {
            let (g, byte) = bank.header(l);
            b.on_header(g, byte);
        }
        let mut held: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut sent = vec![0u64; n];
        let mut k = 0usize;
        for step in 0..steps {
            for i in 0..n {
                // A quiet half of the senders after a while.
                let active = step < steps / 3 || i % 2 == 0;
                if active && borrowers[i].try_spend(cost) {
                    assert_eq!(bank.on_arrival(&mut lenders[i], cost), Admit::Ok);
                    held[i].push(cost);
                    sent[i] += 1;
                }
                // The application takes one message per peer every other step.
                if step % 2 == 0 {
                    if let Some(x) = held[i].pop() {
                        bank.on_freed(&mut lenders[i], x);
                    }
                }
                k += 1;
                if !lost(k, lose_every) {
                    let (r, byte) = borrowers[i].header();
                    bank.on_header(&mut lenders[i], r, byte);
                }
                k += 1;
                if !lost(k, lose_every) {
                    let (g, byte) = bank.header(&lenders[i]);
                    borrowers[i].on_header(g, byte);
                }
            }
            bank.tick(step as u64 * 10, lenders.iter_mut());
            let in_use: u32 = lenders.iter().map(|l| l.held).sum();
            assert!(in_use <= c.total, "held {in_use} > budget");
            let lent: u32 = lenders.iter().map(|l| l.loan).sum();
            assert_eq!(lent + bank.banked(), c.total, "credits created or lost");
        }
        for (i, s) in sent.iter().enumerate() {
            assert!(*s > 0, "sender {i} starved");
        }
        // The active senders kept going after the others went quiet.
        assert!(sent[0] > (steps / 3) as u64 / 4, "{sent:?}");
    }

    #[test]
    fn budget_holds_with_few_and_many_senders() {
        run(2, 3, 0, 3000);
        run(16, 3, 0, 3000);
        run(150, 1, 0, 2000);
    }

    #[test]
    fn lost_headers_lose_no_credits() {
        run(16, 3, 3, 3000);
        run(8, 5, 2, 3000);
    }

    #[test]
    fn quiet_peers_give_back_when_the_bank_runs_low() {
        let c = cfg();
        let mut bank = CreditBank::new(c);
        let mut quiet = bank.open();
        let mut busy = bank.open();
        let mut qb = Borrower::new(c.min_loan);
        // The quiet one borrowed a lot once.
        qb.on_header(bank.header(&quiet).0, 0);
        qb.try_spend(1000);
        bank.on_header(&mut quiet, qb.header().0, qb.header().1);
        assert!(quiet.loan > 300, "lent on request: {}", quiet.loan);
        qb.on_header(bank.header(&quiet).0, 0);
        assert!(qb.try_spend(300));
        // ... and freed it all.
        bank.on_arrival(&mut quiet, 300);
        bank.on_freed(&mut quiet, 300);
        qb.on_header(bank.header(&quiet).0, 0);
        // The busy one drains the bank.
        let mut bb = Borrower::new(c.min_loan);
        bb.try_spend(1000);
        bank.on_header(&mut busy, bb.header().0, bb.header().1);
        assert!(bank.banked() < c.low_water);
        // The quiet one's usage decays by half per epoch while the busy one
        // keeps using its credits; once it reads zero, it is asked.
        let mut epochs = 0;
        while bank.header(&quiet).1 == 0 {
            bank.on_arrival(&mut busy, 1);
            bank.on_freed(&mut busy, 1);
            bank.tick(epochs * 100, [&mut quiet, &mut busy].into_iter());
            epochs += 1;
            assert!(epochs < 20, "never asked the quiet peer");
        }
        assert!(epochs > 5, "asked while its usage had not decayed");
        assert_eq!(bank.header(&busy).1, 0, "the busy peer is left alone");
        let (g, byte) = bank.header(&quiet);
        assert_eq!(byte & GIVE_BACK, GIVE_BACK);
        qb.on_header(g, byte);
        let before = bank.banked();
        let (r, byte) = qb.header();
        bank.on_header(&mut quiet, r, byte);
        assert_eq!(quiet.loan, c.min_loan);
        assert!(bank.banked() > before);
        assert_eq!(qb.available(), c.min_loan);
    }

    #[test]
    fn a_sender_over_its_loan_is_refused() {
        let mut bank = CreditBank::new(cfg());
        let mut l = bank.open();
        assert_eq!(
            bank.on_arrival(&mut l, 1),
            Admit::OverLoan,
            "nothing before the first request"
        );
        bank.on_header(&mut l, 0, STALLED);
        for _ in 0..10 {
            assert_eq!(bank.on_arrival(&mut l, 1), Admit::Ok);
        }
        assert_eq!(bank.on_arrival(&mut l, 1), Admit::OverLoan);
        // Garbage returns cannot mint credits.
        bank.on_header(&mut l, u32::MAX - 5, 0);
        bank.on_header(&mut l, 1_000_000, 0);
        assert_eq!(l.loan + bank.banked(), 1000);
    }

    #[test]
    fn cost_rounds_up_and_charges_empty_messages() {
        let c = cfg();
        assert_eq!((c.cost(0), c.cost(1), c.cost(1024), c.cost(1025)), (1, 1, 1, 2));
    }
}
