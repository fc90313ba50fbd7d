//! A binary heap with removal and update by key.
//!
//! `std::collections::BinaryHeap` cannot delete or re-prioritise an arbitrary element, and the queue
//! must do both (a pod is deleted or updated while it waits). The order is given per call as a
//! `less` closure because it comes from the QueueSort plugin, which is not an `Ord`. Elements that
//! `less` considers equal come out in insertion order, so equal pods are FIFO and tests are
//! deterministic even with a stopped clock.
//!
//! The position index is keyed by pod UID and hashed with [`FastHashMap`]: every sift step
//! updates two positions, and SipHash over the two UIDs was the largest part of a swap. UIDs are
//! the API server's, not chosen by whoever creates a pod.

use unisched_fasthash::FastHashMap;

/// Something with a stable identity.
pub(crate) trait Keyed {
    fn key(&self) -> &str;
}

#[derive(Debug)]
struct Slot<T> {
    seq: u64,
    item: T,
}

/// A keyed binary min-heap ("min" according to `less`).
#[derive(Debug)]
pub(crate) struct KeyedHeap<T> {
    slots: Vec<Slot<T>>,
    index: FastHashMap<String, usize>,
    next_seq: u64,
}

impl<T> Default for KeyedHeap<T> {
    fn default() -> Self {
        KeyedHeap {
            slots: Vec::new(),
            index: FastHashMap::default(),
            next_seq: 0,
        }
    }
}

impl<T: Keyed> KeyedHeap<T> {
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&T> {
        self.index
            .get(key)
            .and_then(|&i| self.slots.get(i))
            .map(|s| &s.item)
    }

    pub(crate) fn peek(&self) -> Option<&T> {
        self.slots.first().map(|s| &s.item)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|s| &s.item)
    }

    /// Inserts `item`, or replaces the element with the same key (keeping its FIFO position among
    /// equals) and restores the order.
    pub(crate) fn push(&mut self, item: T, less: &dyn Fn(&T, &T) -> bool) {
        if let Some(&i) = self.index.get(item.key()) {
            if let Some(slot) = self.slots.get_mut(i) {
                slot.item = item;
            }
            self.fix(i, less);
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let i = self.slots.len();
        self.index.insert(item.key().to_string(), i);
        self.slots.push(Slot { seq, item });
        self.up(i, less);
    }

    /// Removes and returns the first element.
    pub(crate) fn pop(&mut self, less: &dyn Fn(&T, &T) -> bool) -> Option<T> {
        if self.slots.is_empty() {
            return None;
        }
        self.remove_at(0, less)
    }

    /// Removes the element with this key.
    pub(crate) fn remove(&mut self, key: &str, less: &dyn Fn(&T, &T) -> bool) -> Option<T> {
        let i = *self.index.get(key)?;
        self.remove_at(i, less)
    }

    /// Applies `f` to the element with this key and restores the order. Returns false when absent.
    pub(crate) fn update(
        &mut self,
        key: &str,
        less: &dyn Fn(&T, &T) -> bool,
        f: impl FnOnce(&mut T),
    ) -> bool {
        let Some(&i) = self.index.get(key) else {
            return false;
        };
        let Some(slot) = self.slots.get_mut(i) else {
            return false;
        };
        f(&mut slot.item);
        self.fix(i, less);
        true
    }

    fn remove_at(&mut self, i: usize, less: &dyn Fn(&T, &T) -> bool) -> Option<T> {
        let last = self.slots.len().checked_sub(1)?;
        self.swap(i, last);
        let slot = self.slots.pop()?;
        self.index.remove(slot.item.key());
        if i < self.slots.len() {
            self.fix(i, less);
        }
        Some(slot.item)
    }

    fn before(&self, a: usize, b: usize, less: &dyn Fn(&T, &T) -> bool) -> bool {
        let (sa, sb) = (&self.slots[a], &self.slots[b]);
        if less(&sa.item, &sb.item) {
            return true;
        }
        if less(&sb.item, &sa.item) {
            return false;
        }
        sa.seq < sb.seq
    }

    fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.slots.swap(a, b);
        for i in [a, b] {
            if let Some(pos) = self.index.get_mut(self.slots[i].item.key()) {
                *pos = i;
            }
        }
    }

    fn fix(&mut self, i: usize, less: &dyn Fn(&T, &T) -> bool) {
        if !self.up(i, less) {
            self.down(i, less);
        }
    }

    /// Sifts up; true when the element moved.
    fn up(&mut self, mut i: usize, less: &dyn Fn(&T, &T) -> bool) -> bool {
        let start = i;
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.before(i, parent, less) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
        i != start
    }

    fn down(&mut self, mut i: usize, less: &dyn Fn(&T, &T) -> bool) {
        let n = self.slots.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let mut child = l;
            let r = l + 1;
            if r < n && self.before(r, l, less) {
                child = r;
            }
            if !self.before(child, i, less) {
                break;
            }
            self.swap(i, child);
            i = child;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone)]
    struct Item(String, i32);
    impl Keyed for Item {
        fn key(&self) -> &str {
            &self.0
        }
    }

    fn less(a: &Item, b: &Item) -> bool {
        a.1 < b.1
    }

    #[test]
    fn order_fifo_ties_remove_update() {
        let mut h = KeyedHeap::default();
        for (k, v) in [("a", 5), ("b", 1), ("c", 5), ("d", 3), ("e", 1)] {
            h.push(Item(k.into(), v), &less);
        }
        assert!(h.remove("d", &less).is_some());
        assert!(h.update("a", &less, |i| i.1 = 0));
        h.push(Item("c".into(), 2), &less);
        let mut out = Vec::new();
        while let Some(i) = h.pop(&less) {
            out.push(i.0);
        }
        assert_eq!(out, ["a", "b", "e", "c"]);
        assert_eq!(h.len(), 0);
    }

    proptest::proptest! {
        #[test]
        fn pops_sorted(values in proptest::collection::vec((0u8..20, 0i32..5), 0..60), removes in proptest::collection::vec(0u8..20, 0..10)) {
            let mut h = KeyedHeap::default();
            let mut model = std::collections::BTreeMap::new();
            for (k, v) in values {
                h.push(Item(k.to_string(), v), &less);
                model.insert(k.to_string(), v);
            }
            for k in removes {
                let a = h.remove(&k.to_string(), &less).map(|i| i.1);
                let b = model.remove(&k.to_string());
                proptest::prop_assert_eq!(a, b);
            }
            let mut last = i32::MIN;
            let mut n = 0;
            while let Some(i) = h.pop(&less) {
                proptest::prop_assert!(i.1 >= last);
                proptest::prop_assert_eq!(model.get(&i.0), Some(&i.1));
                last = i.1;
                n += 1;
            }
            proptest::prop_assert_eq!(n, model.len());
        }
    }
}
