//! What a snapshot's generated resources are shared as: a [`Layer`] is a set of resources of
//! one type, shared by proxies, that names which of its names differ from the layer it
//! replaced (see `memo.rs` for how the next snapshot reuses what the previous one generated).
//! Streams use that record to look only at those names; [`Resources`] is the layers one proxy
//! receives of one type.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::xds::resource::{Resource, ResourceSet, Version};

static LAYER_IDS: AtomicU64 = AtomicU64::new(1);

/// A set of resources of one type, shared by proxies (or a proxy's own), with the names that
/// differ from the layer it replaced.
#[derive(Debug)]
pub struct Layer {
    set: ResourceSet,
    /// [`Version::of_set`] of `set`.
    version: Version,
    /// Unique in the process.
    id: u64,
    /// The layer this one replaced, and the names added, changed or removed since.
    base: Option<(u64, Vec<Arc<str>>)>,
}

impl Layer {
    /// A layer with no predecessor.
    pub(crate) fn new(set: ResourceSet) -> Arc<Self> {
        Arc::new(Self {
            version: Version::of_set(set.values().map(|r| &**r)),
            id: LAYER_IDS.fetch_add(1, Ordering::Relaxed),
            base: None,
            set,
        })
    }

    /// The layer replacing `previous`: `previous` itself when `set` holds the same resources.
    pub(crate) fn after(previous: Option<&Arc<Layer>>, set: ResourceSet) -> Arc<Self> {
        let Some(previous) = previous else {
            return Self::new(set);
        };
        let changed = differing(&previous.set, &set);
        if changed.is_empty() {
            return previous.clone();
        }
        Arc::new(Self {
            version: Version::of_set(set.values().map(|r| &**r)),
            id: LAYER_IDS.fetch_add(1, Ordering::Relaxed),
            base: Some((previous.id, changed)),
            set,
        })
    }

    /// Unique in the process: what was made of this layer is keyed by it.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The resources, by name.
    pub fn set(&self) -> &ResourceSet {
        &self.set
    }

    /// The hash of every name and version in the layer.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The names that may differ from `earlier`: none when it is this layer, the recorded
    /// ones when this layer replaced it, `None` when the two are unrelated (compare all).
    pub fn changed_since(&self, earlier: &Layer) -> Option<&[Arc<str>]> {
        if self.id == earlier.id || self.version == earlier.version {
            return Some(&[]);
        }
        match &self.base {
            Some((id, names)) if *id == earlier.id => Some(names),
            _ => None,
        }
    }
}

/// The resources of one type a proxy may receive: shared layers plus, for some types, a layer
/// of its own. Names never repeat across layers.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    pub(super) layers: Vec<Arc<Layer>>,
}

impl Resources {
    /// These layers, as a proxy would receive them (for tests of what reads them).
    #[cfg(test)]
    pub(crate) fn of(layers: Vec<Arc<Layer>>) -> Self {
        Self { layers }
    }

    /// The resource with this name, if the proxy may receive it.
    pub fn get(&self, name: &str) -> Option<&Arc<Resource>> {
        self.layers.iter().find_map(|l| l.set().get(name))
    }

    /// The resources of `names` that there are, in name order. Both are sorted, so when the
    /// names are many (a sidecar's endpoints request names every cluster), one walk of each
    /// layer beside them finds them all; a search per name cost a tenth of a full-mesh
    /// sidecar's push in `perf`, in string comparisons.
    pub fn get_all(&self, names: &BTreeSet<Arc<str>>) -> Vec<&Arc<Resource>> {
        if self.few(names.len()) {
            return names.iter().filter_map(|n| self.get(n)).collect();
        }
        self.named_from(names, Bound::Unbounded).collect()
    }

    /// True when `n` names are better found by a search each than by a walk beside the
    /// layers.
    pub fn few(&self, n: usize) -> bool {
        n < self.len() / 16
    }

    /// As [`Resources::get_all`], lazily, from the name `from` bounds on.
    pub(super) fn named_from<'a, 'n>(
        &'a self,
        names: &'n BTreeSet<Arc<str>>,
        from: Bound<&'n str>,
    ) -> impl Iterator<Item = &'a Arc<Resource>> {
        let mut layers: Vec<_> = self
            .layers
            .iter()
            .map(|l| l.set().range::<str, _>((from, Bound::Unbounded)).peekable())
            .collect();
        names
            .range::<str, _>((from, Bound::Unbounded))
            .filter_map(move |name| {
                layers.iter_mut().find_map(|layer| {
                    while layer.next_if(|(n, _)| n.as_ref() < name.as_ref()).is_some() {}
                    layer
                        .next_if(|(n, _)| n.as_ref() == name.as_ref())
                        .map(|(_, r)| r)
                })
            })
    }

    /// Every resource, layer by layer, each layer in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.layers.iter().flat_map(|l| l.set().values())
    }

    /// How many resources there are.
    pub fn len(&self) -> usize {
        self.layers.iter().map(|l| l.set().len()).sum()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The layers, which a stream keeps to know later what it was offered.
    pub fn layers(&self) -> &[Arc<Layer>] {
        &self.layers
    }

    /// A hash of every name and version offered: equal hashes, equal resources.
    pub fn version(&self) -> Version {
        let mut bytes = Vec::with_capacity(8 * self.layers.len());
        for layer in &self.layers {
            bytes.extend_from_slice(&layer.version().0.to_le_bytes());
        }
        Version::of_bytes(&bytes)
    }

    /// True when these are the resources `earlier` layers offered.
    pub fn same_as(&self, earlier: &[Arc<Layer>]) -> bool {
        self.layers.len() == earlier.len()
            && self
                .layers
                .iter()
                .zip(earlier)
                .all(|(a, b)| a.version() == b.version())
    }

    /// The names whose resource may differ from what the `earlier` layers offered, when every
    /// layer is the same as, or replaced, the earlier one in its place; `None` otherwise.
    pub fn changed_since(&self, earlier: &[Arc<Layer>]) -> Option<BTreeSet<Arc<str>>> {
        if self.layers.len() != earlier.len() {
            return None;
        }
        let mut names = BTreeSet::new();
        for (layer, before) in self.layers.iter().zip(earlier) {
            names.extend(layer.changed_since(before)?.iter().cloned());
        }
        Some(names)
    }
}

/// Names in one set and not the other, or in both with different content. Both sets are in
/// name order, so one walk finds them.
pub(crate) fn differing(a: &ResourceSet, b: &ResourceSet) -> Vec<Arc<str>> {
    let same = |x: &Arc<Resource>, y: &Arc<Resource>| Arc::ptr_eq(x, y) || x.version == y.version;
    let mut out = Vec::new();
    let mut a = a.iter().peekable();
    let mut b = b.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => return out,
            (Some((name, _)), None) => {
                out.push((*name).clone());
                a.next();
            }
            (None, Some((name, _))) => {
                out.push((*name).clone());
                b.next();
            }
            (Some((na, ra)), Some((nb, rb))) => match na.cmp(nb) {
                std::cmp::Ordering::Less => {
                    out.push((*na).clone());
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    out.push((*nb).clone());
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if !same(ra, rb) {
                        out.push((*na).clone());
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::xds::pb::cluster::Cluster;
    use crate::xds::resource::insert;

    fn cluster(name: &str, timeout_ms: u32) -> Resource {
        let message = Cluster {
            name: name.into(),
            alt_stat_name: format!("{name}-{timeout_ms}"),
            ..Default::default()
        };
        Resource::encode(name, &message)
    }

    pub(crate) fn set(items: &[(&str, u32)]) -> ResourceSet {
        let mut set = ResourceSet::new();
        for (name, n) in items {
            insert(&mut set, cluster(name, *n));
        }
        set
    }

    #[test]
    fn a_layer_names_what_differs_from_the_one_it_replaced() {
        let first = Layer::new(set(&[("a", 1), ("b", 1), ("c", 1)]));
        let same = Layer::after(Some(&first), set(&[("a", 1), ("b", 1), ("c", 1)]));
        assert!(Arc::ptr_eq(&first, &same), "equal content keeps the layer");
        let second = Layer::after(Some(&first), set(&[("a", 1), ("b", 2), ("d", 1)]));
        let names: Vec<&str> = second
            .changed_since(&first)
            .expect("second replaced first")
            .iter()
            .map(|n| &**n)
            .collect();
        assert_eq!(names, ["b", "c", "d"]);
        assert_eq!(second.changed_since(&second), Some(&[][..]));
        let third = Layer::after(Some(&second), set(&[("a", 2), ("b", 2), ("d", 1)]));
        assert_eq!(
            third.changed_since(&first),
            None,
            "two steps back is unknown"
        );
        let unrelated = Layer::new(set(&[("a", 1), ("b", 1), ("c", 1)]));
        assert_eq!(
            unrelated.changed_since(&first),
            Some(&[][..]),
            "equal content"
        );
    }

    #[test]
    fn get_all_finds_the_names_there_are_across_layers_in_name_order() {
        let shared: Vec<(String, u32)> = (0..40).map(|i| (format!("c{i:02}"), 1)).collect();
        let shared: Vec<(&str, u32)> = shared.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let all = Resources {
            layers: vec![
                Layer::new(set(&shared)),
                Layer::new(set(&[("b", 1), ("d", 1)])),
            ],
        };
        let names =
            |list: &[&str]| -> BTreeSet<Arc<str>> { list.iter().map(|n| Arc::from(*n)).collect() };
        let found = |list: &[&str]| -> Vec<String> {
            all.get_all(&names(list))
                .iter()
                .map(|r| r.name.to_string())
                .collect()
        };
        // Many names: one walk of each layer; few: a search each. Both give the same.
        let many: Vec<String> = (0..40).step_by(2).map(|i| format!("c{i:02}")).collect();
        let mut many: Vec<&str> = many.iter().map(String::as_str).collect();
        many.extend(["a", "b", "d", "zz"]);
        let mut expected: Vec<String> = many
            .iter()
            .filter(|n| !["a", "zz"].contains(n))
            .map(|n| n.to_string())
            .collect();
        expected.sort();
        assert_eq!(found(&many), expected);
        assert_eq!(found(&["d", "c07", "missing"]), ["c07", "d"]);
        assert_eq!(found(&["d"]), ["d"], "a search in the second layer");
        assert_eq!(found(&["c07"]), ["c07"]);
        assert!(found(&[]).is_empty());
    }
}
