//! [`Few`]: a list that is almost always one item long (one key, one
//! renewal, one wake-up), kept inline until a second item comes, so that
//! the one-key path of every command allocates nothing while the same code
//! serves `LOCK.MACQUIRE`'s many keys.

/// Zero, one (inline) or many (on the heap) items, read as one slice.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Few<T> {
    #[default]
    Zero,
    One([T; 1]),
    Many(Vec<T>),
}

impl<T> Few<T> {
    pub fn new() -> Self {
        Few::Zero
    }

    /// Room for `n` items: on the heap at once when more than one will
    /// come, so the second push does not move the first.
    #[inline]
    pub fn with_capacity(n: usize) -> Self {
        match n {
            0 | 1 => Few::Zero,
            n => Few::Many(Vec::with_capacity(n)),
        }
    }

    #[inline]
    pub fn push(&mut self, item: T) {
        match self {
            Few::Many(items) => items.push(item),
            Few::Zero => *self = Few::One([item]),
            Few::One(_) => {
                if let Few::One([first]) = std::mem::take(self) {
                    *self = Few::Many(vec![first, item]);
                }
            }
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[T] {
        match self {
            Few::Zero => &[],
            Few::One(one) => one,
            Few::Many(items) => items,
        }
    }

    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Few::Zero => &mut [],
            Few::One(one) => one,
            Few::Many(items) => items,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.as_slice().iter()
    }
}

impl<T> std::ops::Deref for Few<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> std::ops::DerefMut for Few<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T> FromIterator<T> for Few<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut few = Few::new();
        for item in iter {
            few.push(item);
        }
        few
    }
}

/// A [`Few`]'s items, by value, in order.
pub enum IntoIter<T> {
    One(Option<T>),
    Many(std::vec::IntoIter<T>),
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            IntoIter::One(one) => one.take(),
            IntoIter::Many(items) => items.next(),
        }
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    #[inline]
    fn into_iter(self) -> IntoIter<T> {
        match self {
            Few::Zero => IntoIter::One(None),
            Few::One([one]) => IntoIter::One(Some(one)),
            Few::Many(items) => IntoIter::Many(items.into_iter()),
        }
    }
}

impl<'a, T> IntoIterator for &'a Few<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    #[inline]
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::Few;

    #[test]
    fn one_item_stays_inline_and_more_go_to_the_heap_in_order() {
        let mut few = Few::new();
        assert!(few.is_empty());
        few.push(1);
        assert!(matches!(few, Few::One(_)));
        assert_eq!(few.as_slice(), &[1]);
        few.push(2);
        few.push(3);
        assert!(matches!(few, Few::Many(_)));
        assert_eq!(few.as_slice(), &[1, 2, 3]);
        few[0] = 7;
        assert_eq!(few.into_iter().collect::<Vec<_>>(), vec![7, 2, 3]);
    }

    #[test]
    fn with_capacity_for_one_allocates_nothing() {
        let mut few = Few::with_capacity(1);
        few.push("k");
        assert!(matches!(few, Few::One(_)));
        let many: Few<u8> = Few::with_capacity(3);
        assert!(matches!(many, Few::Many(ref v) if v.capacity() >= 3));
        let collected: Few<i32> = (0..1).collect();
        assert_eq!(collected.into_iter().collect::<Vec<_>>(), vec![0]);
    }
}
