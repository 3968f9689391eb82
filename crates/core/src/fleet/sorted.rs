//! A map that is one list kept sorted by key ([`SortedMap`]), and its two uses in the fleet
//! state: the clusters by name ([`NameMap`], persisted as a JSON object) and a cluster's
//! analysis runs by key ([`RunMap`](super::RunMap), persisted as a list of pairs). A tick reaches
//! each cluster by its place instead of looking its name up (at 10,000 clusters a `BTreeMap`
//! lookup by name missed the cache on most keys it compared, and a tick made several per
//! cluster), and a cluster's handful of runs costs less than a map's node would.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

/// Values by key, in key order; a key's place is stable until a key is added or removed.
/// `Form` says how it is persisted: [`AsObject`] or [`AsPairs`].
pub struct SortedMap<K, V, Form>(Vec<(K, V)>, PhantomData<Form>);

/// Persisted as a JSON object of key to value, as a `BTreeMap` with string keys writes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AsObject;

/// Persisted as a list of (key, value) pairs (JSON objects need string keys).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AsPairs;

/// The clusters by name: a JSON object of name to value, as the `BTreeMap` it replaced.
pub type NameMap<V> = SortedMap<String, V, AsObject>;

/// Up to this many entries a list grows by one at a time (a cluster's runs: no spare capacity
/// in each of 10,000 clusters); past it, as a `Vec` grows.
const EXACT_GROWTH: usize = 8;

impl<K, V, F> SortedMap<K, V, F> {
    fn from_sorted(entries: Vec<(K, V)>) -> Self {
        SortedMap(entries, PhantomData)
    }

    /// The place of `key` (Err: where it would go).
    pub fn place<Q>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// The value of a key.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.place(key).ok().map(|i| &self.0[i].1)
    }

    /// The value of a key, to change it.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.place(key).ok().map(|i| &mut self.0[i].1)
    }

    /// Whether there is a value of that key.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.place(key).is_ok()
    }

    /// The entry at a place (from [`Self::place`], or the order of [`Self::keys`]).
    pub fn at(&self, place: usize) -> Option<(&K, &V)> {
        self.0.get(place).map(|(k, v)| (k, v))
    }

    /// The value at a place, to change it.
    pub fn at_mut(&mut self, place: usize) -> Option<&mut V> {
        self.0.get_mut(place).map(|(_, v)| v)
    }

    fn insert_at(&mut self, place: usize, key: K, value: V) {
        if self.0.len() < EXACT_GROWTH && self.0.len() == self.0.capacity() {
            self.0.reserve_exact(1);
        }
        self.0.insert(place, (key, value));
    }

    /// Sets the value of a key; returns the one it replaces.
    pub fn insert(&mut self, key: K, value: V) -> Option<V>
    where
        K: Ord,
    {
        match self.place(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.insert_at(i, key, value);
                None
            }
        }
    }

    /// The value of a key, added as the default when there is none.
    pub fn get_or_default<Q>(&mut self, key: &Q) -> &mut V
    where
        K: Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
        V: Default,
    {
        let i = match self.place(key) {
            Ok(i) => i,
            Err(i) => {
                self.insert_at(i, key.to_owned(), V::default());
                i
            }
        };
        &mut self.0[i].1
    }

    /// Removes the value of a key.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.place(key).ok().map(|i| self.0.remove(i).1)
    }

    /// Keeps the entries `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.0.retain_mut(|(k, v)| keep(k, v));
    }

    /// Removes every entry (and frees the list).
    pub fn clear(&mut self) {
        self.0 = Vec::new();
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.0.iter().map(|(k, _)| k)
    }

    /// The values, in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.0.iter().map(|(_, v)| v)
    }

    /// The values, in key order, to change them.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// (key, value) pairs, in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// (key, value) pairs, in key order, to change the values.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K, V, F> Default for SortedMap<K, V, F> {
    fn default() -> Self {
        Self::from_sorted(Vec::new())
    }
}

impl<K: Clone, V: Clone, F> Clone for SortedMap<K, V, F> {
    fn clone(&self) -> Self {
        Self::from_sorted(self.0.clone())
    }
}

impl<K: PartialEq, V: PartialEq, F> PartialEq for SortedMap<K, V, F> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug, F> std::fmt::Debug for SortedMap<K, V, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// The value of a key known to be there.
impl<K, V, F, Q> std::ops::Index<&Q> for SortedMap<K, V, F>
where
    K: Borrow<Q>,
    Q: Ord + ?Sized,
{
    type Output = V;

    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("a known key")
    }
}

/// Sorted by key, the last of a repeated key kept (as a map would).
impl<K: Ord, V, F> FromIterator<(K, V)> for SortedMap<K, V, F> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let map: BTreeMap<K, V> = iter.into_iter().collect();
        map.into()
    }
}

impl<K, V, F> From<BTreeMap<K, V>> for SortedMap<K, V, F> {
    fn from(map: BTreeMap<K, V>) -> Self {
        Self::from_sorted(map.into_iter().collect())
    }
}

impl<'a, K, V, F> IntoIterator for &'a SortedMap<K, V, F> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<K, V, F> IntoIterator for SortedMap<K, V, F> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<K: Serialize, V: Serialize> Serialize for SortedMap<K, V, AsObject> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de, K: Deserialize<'de> + Ord, V: Deserialize<'de>> Deserialize<'de>
    for SortedMap<K, V, AsObject>
{
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(BTreeMap::<K, V>::deserialize(deserializer)?.into())
    }
}

impl<K: Serialize, V: Serialize> Serialize for SortedMap<K, V, AsPairs> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, K: Deserialize<'de> + Ord, V: Deserialize<'de>> Deserialize<'de>
    for SortedMap<K, V, AsPairs>
{
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_a_sorted_map_by_name_and_persists_as_one() {
        let mut map: NameMap<u32> = [
            ("b".to_owned(), 1),
            ("a".to_owned(), 2),
            ("b".to_owned(), 3),
        ]
        .into_iter()
        .collect();
        assert_eq!(map.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(map["b"], 3, "the last of a name kept");
        assert_eq!(map.place("b"), Ok(1));
        assert_eq!(map.place("ab"), Err(1));
        *map.get_or_default("ab") += 7;
        assert_eq!(map.at(1), Some((&"ab".to_owned(), &7)));
        assert!(map.insert("c".into(), 4).is_none());
        assert_eq!(map.insert("c".into(), 5), Some(4));
        assert_eq!(map.remove("a"), Some(2));
        map.retain(|name, _| name != "c");
        assert_eq!(map.keys().collect::<Vec<_>>(), ["ab", "b"]);
        *map.at_mut(0).unwrap() += 1;
        assert_eq!(map.values().copied().collect::<Vec<_>>(), [8, 3]);

        // The same JSON as the BTreeMap it replaces, both ways.
        let as_btree: BTreeMap<String, u32> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let json = serde_json::to_string(&map).unwrap();
        assert_eq!(json, serde_json::to_string(&as_btree).unwrap());
        assert_eq!(json, r#"{"ab":8,"b":3}"#);
        let back: NameMap<u32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, map);
    }

    #[test]
    fn pairs_persist_as_a_list_sorted_on_reading_and_short_lists_grow_exactly() {
        let mut map: SortedMap<(u32, u32), &str, AsPairs> = SortedMap::default();
        map.insert((2, 0), "b");
        map.insert((1, 5), "a");
        assert_eq!(map.0.capacity(), 2, "a short list grows one at a time");
        assert_eq!(map[&(1, 5)], "a");
        let json = serde_json::to_string(&map).unwrap();
        assert_eq!(json, r#"[[[1,5],"a"],[[2,0],"b"]]"#);
        // Unsorted and repeated on disk: sorted, the last of a key kept.
        let back: SortedMap<(u32, u32), String, AsPairs> =
            serde_json::from_str(r#"[[[2,0],"b"],[[1,5],"x"],[[1,5],"a"]]"#).unwrap();
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            [(&(1, 5), &"a".to_owned()), (&(2, 0), &"b".to_owned())]
        );
        for i in 0..100 {
            map.insert((10 + i, 0), "c");
        }
        assert!(map.0.capacity() >= map.len(), "a long list grows as a Vec");
        map.clear();
        assert_eq!((map.len(), map.0.capacity()), (0, 0));
    }
}
