//! A map by cluster name that is one list kept sorted by name ([`NameMap`]): the fleet state's
//! clusters, so that a tick reaches each cluster by its place instead of looking its name up
//! (at 10,000 clusters a `BTreeMap` lookup by name missed the cache on most keys it compared,
//! and a tick made several per cluster). Serialized as the map it replaces, so persisted state
//! reads and writes the same.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Values by name, in name order; a name's place is stable until a name is added or removed.
#[derive(Debug, Clone, PartialEq)]
pub struct NameMap<V>(Vec<(String, V)>);

impl<V> Default for NameMap<V> {
    fn default() -> Self {
        NameMap(Vec::new())
    }
}

impl<V> NameMap<V> {
    /// The place of `name` (Err: where it would go).
    pub fn place(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(name))
    }

    /// The cluster of a name.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.place(name).ok().map(|i| &self.0[i].1)
    }

    /// The cluster of a name, to change it.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        self.place(name).ok().map(|i| &mut self.0[i].1)
    }

    /// Whether there is a cluster of that name.
    pub fn contains_key(&self, name: &str) -> bool {
        self.place(name).is_ok()
    }

    /// The cluster at a place (from [`Self::place`], or the order of [`Self::keys`]).
    pub fn at(&self, place: usize) -> Option<(&String, &V)> {
        self.0.get(place).map(|(k, c)| (k, c))
    }

    /// The cluster at a place, to change it.
    pub fn at_mut(&mut self, place: usize) -> Option<&mut V> {
        self.0.get_mut(place).map(|(_, c)| c)
    }

    /// Sets the cluster of a name; returns the one it replaces.
    pub fn insert(&mut self, name: String, cluster: V) -> Option<V> {
        match self.place(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, cluster)),
            Err(i) => {
                self.0.insert(i, (name, cluster));
                None
            }
        }
    }

    /// The value of a name, added as the default when there is none.
    pub fn get_or_default(&mut self, name: &str) -> &mut V
    where
        V: Default,
    {
        let i = match self.place(name) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (name.to_owned(), V::default()));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Removes the cluster of a name.
    pub fn remove(&mut self, name: &str) -> Option<V> {
        self.place(name).ok().map(|i| self.0.remove(i).1)
    }

    /// Keeps the clusters `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut V) -> bool) {
        self.0.retain_mut(|(k, c)| keep(k, c));
    }

    /// The names, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.0.iter().map(|(k, _)| k)
    }

    /// The clusters, in name order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.0.iter().map(|(_, c)| c)
    }

    /// The clusters, in name order, to change them.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, c)| c)
    }

    /// (name, cluster) pairs, in name order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &V)> + ExactSizeIterator {
        self.0.iter().map(|(k, c)| (k, c))
    }

    /// (name, cluster) pairs, in name order, to change the clusters.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut V)> {
        self.0.iter_mut().map(|(k, c)| (&*k, c))
    }

    /// How many clusters.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V> std::ops::Index<&str> for NameMap<V> {
    type Output = V;

    fn index(&self, name: &str) -> &V {
        self.get(name).expect("known cluster")
    }
}

impl<V> std::ops::Index<&String> for NameMap<V> {
    type Output = V;

    fn index(&self, name: &String) -> &V {
        &self[name.as_str()]
    }
}

/// Sorted by name, the last of a repeated name kept (as a map would).
impl<V> FromIterator<(String, V)> for NameMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> NameMap<V> {
        let map: BTreeMap<String, V> = iter.into_iter().collect();
        NameMap(map.into_iter().collect())
    }
}

impl<V> From<BTreeMap<String, V>> for NameMap<V> {
    fn from(map: BTreeMap<String, V>) -> NameMap<V> {
        NameMap(map.into_iter().collect())
    }
}

impl<'a, V> IntoIterator for &'a NameMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, V)>,
        fn(&'a (String, V)) -> (&'a String, &'a V),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, c)| (k, c))
    }
}

impl<V> IntoIterator for NameMap<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// A JSON object of name to cluster, as a `BTreeMap` writes it.
impl<V: Serialize> Serialize for NameMap<V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, c)| (k, c)))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for NameMap<V> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<NameMap<V>, D::Error> {
        Ok(BTreeMap::<String, V>::deserialize(deserializer)?.into())
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
}
