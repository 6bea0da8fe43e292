//! A slab whose ids carry a generation: an id that outlived its entry
//! finds nothing rather than the entry that took its slot. The tables of
//! the NIC layer (`FabReqs`, `TxPool`) are built on it.

#![forbid(unsafe_code)]

struct Slot<T> {
    gen: u32,
    val: Option<T>,
}

pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

fn id(i: u32, gen: u32) -> u64 {
    (gen as u64) << 32 | i as u64
}

fn split(id: u64) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn insert(&mut self, v: T) -> u64 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot { gen: 0, val: None });
                u32::try_from(self.slots.len() - 1).expect("slab: more than 2^32 entries")
            }
        };
        let s = &mut self.slots[i as usize];
        s.val = Some(v);
        self.len += 1;
        id(i, s.gen)
    }

    /// An id for an entry not there yet: its slot is taken (`get` and
    /// `remove` find nothing there) until `fill` puts the entry in or
    /// `unreserve` gives the slot back. Lets a caller hand the id out
    /// before it knows whether the entry is needed at all, without moving
    /// the entry in and out again when it is not.
    pub(crate) fn reserve(&mut self) -> u64 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot { gen: 0, val: None });
                u32::try_from(self.slots.len() - 1).expect("slab: more than 2^32 entries")
            }
        };
        self.len += 1;
        id(i, self.slots[i as usize].gen)
    }

    /// Puts the entry into the slot `reserve` gave `k`.
    pub(crate) fn fill(&mut self, k: u64, v: T) {
        let (i, gen) = split(k);
        let s = &mut self.slots[i];
        debug_assert!(s.gen == gen && s.val.is_none(), "fill of a slot not reserved");
        s.val = Some(v);
    }

    /// Gives back the slot `reserve` gave `k`, unfilled; `k` is dead.
    pub(crate) fn unreserve(&mut self, k: u64) {
        let (i, gen) = split(k);
        let s = &mut self.slots[i];
        debug_assert!(s.gen == gen && s.val.is_none(), "unreserve of a slot not reserved");
        s.gen = s.gen.wrapping_add(1);
        self.free.push(i as u32);
        self.len -= 1;
    }

    pub(crate) fn get(&self, k: u64) -> Option<&T> {
        let (i, gen) = split(k);
        self.slots.get(i).filter(|s| s.gen == gen)?.val.as_ref()
    }

    pub(crate) fn get_mut(&mut self, k: u64) -> Option<&mut T> {
        let (i, gen) = split(k);
        self.slots.get_mut(i).filter(|s| s.gen == gen)?.val.as_mut()
    }

    /// Removes an entry; its id is dead from now on.
    pub(crate) fn remove(&mut self, k: u64) -> Option<T> {
        let (i, gen) = split(k);
        let s = self.slots.get_mut(i).filter(|s| s.gen == gen)?;
        let v = s.val.take()?;
        s.gen = s.gen.wrapping_add(1);
        self.free.push(i as u32);
        self.len -= 1;
        Some(v)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The id of the first entry (in slot order) for which `f` holds.
    pub(crate) fn find(&self, mut f: impl FnMut(&T) -> bool) -> Option<u64> {
        self.slots.iter().enumerate().find_map(|(i, s)| match &s.val {
            Some(v) if f(v) => Some(id(i as u32, s.gen)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_id_finds_nothing() {
        let mut s = Slab::new();
        let a = s.insert('a');
        assert_eq!(s.remove(a), Some('a'));
        let b = s.insert('b');
        assert_ne!(a, b, "same slot, new generation");
        assert_eq!((s.get(a), s.get(b)), (None, Some(&'b')));
        assert_eq!(s.remove(a), None);
        assert_eq!((s.len(), s.find(|&c| c == 'b')), (1, Some(b)));
    }

    #[test]
    fn a_reserved_slot_holds_nothing_until_filled() {
        let mut s = Slab::new();
        let r = s.reserve();
        assert_eq!((s.len(), s.get(r)), (1, None));
        assert_eq!(s.remove(r), None);
        let other = s.insert('o');
        assert_ne!(other, r, "a reserved slot is not handed out again");
        s.fill(r, 'r');
        assert_eq!(s.remove(r), Some('r'));
        let u = s.reserve();
        s.unreserve(u);
        assert_eq!((s.len(), s.get(u)), (1, None));
        assert_ne!(s.reserve(), u, "an unreserved id is dead");
    }
}
