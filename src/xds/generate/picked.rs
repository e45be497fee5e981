//! What a response carries: a list of resources, or a proxy's layers and what of them its
//! subscription wants, walked as the response is written.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use super::cache::Resources;
use crate::xds::resource::Resource;

/// The resources a response carries: a list, or those of a proxy's layers that a
/// subscription wants, walked as the response is written. A full-mesh sidecar's first
/// clusters and endpoints answers are ten thousand resources each; listed, each answer waiting
/// under the push throttle held 80 KB of pointers, 86 MB for 2,000 sidecars at the heap's
/// peak (heaptrack), and cost an atomic increment and decrement per resource.
#[derive(Clone, Debug)]
pub enum Picked {
    /// These resources, in this order.
    List(Vec<Arc<Resource>>),
    /// Every resource of these layers, layer by layer, each in name order (a wildcard
    /// subscription's).
    Every(Resources),
    /// The resources of these layers that these names select, in name order (for many
    /// names: a walk beside them is linear in the layers).
    Named(Resources, Arc<BTreeSet<Arc<str>>>),
}

/// Where a walk of a [`Picked`] resumes: the next resource's place in its list or layer, and
/// its name (the layers are maps, so a name finds it again).
#[derive(Clone, Debug, Default)]
pub struct Place {
    index: usize,
    name: Option<Arc<str>>,
}

impl Default for Picked {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

impl From<Vec<Arc<Resource>>> for Picked {
    fn from(list: Vec<Arc<Resource>>) -> Self {
        Self::List(list)
    }
}

impl PartialEq for Picked {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Picked {
    /// Every resource, in the order a response carries them.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Resource>> {
        static START: Place = Place {
            index: 0,
            name: None,
        };
        self.walk(&START).map(|(_, r)| r)
    }

    /// How many resources there are.
    pub fn len(&self) -> usize {
        match self {
            Self::List(list) => list.len(),
            _ => self.iter().count(),
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The resources from `place` on, each with the index [`Picked::place_of`] takes.
    pub fn walk<'a>(
        &'a self,
        place: &'a Place,
    ) -> Box<dyn Iterator<Item = (usize, &'a Arc<Resource>)> + Send + 'a> {
        let from = place
            .name
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Included);
        match self {
            Self::List(list) => Box::new(list.iter().enumerate().skip(place.index)),
            Self::Every(all) => Box::new(all.layers.iter().enumerate().skip(place.index).flat_map(
                move |(i, layer)| {
                    let from = if i == place.index {
                        from
                    } else {
                        Bound::Unbounded
                    };
                    layer
                        .set()
                        .range::<str, _>((from, Bound::Unbounded))
                        .map(move |(_, r)| (i, r))
                },
            )),
            Self::Named(all, names) => Box::new(all.named_from(names, from).map(|r| (0, r))),
        }
    }

    /// Where a walk resumes to yield `r` first, which the walk yielded with `index`.
    pub fn place_of(&self, index: usize, r: &Resource) -> Place {
        Place {
            index,
            name: match self {
                Self::List(_) => None,
                _ => Some(r.name.clone()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::generate::cache::Layer;
    use crate::xds::generate::cache::tests::set;

    #[test]
    fn a_picked_walk_resumes_where_it_stopped_in_every_form() {
        let all = Resources {
            layers: vec![
                Layer::new(set(&[("a", 1), ("c", 1), ("e", 1)])),
                Layer::new(set(&[("b", 1), ("d", 1)])),
            ],
        };
        let names: BTreeSet<Arc<str>> = ["b", "c", "missing", "e"]
            .into_iter()
            .map(Arc::from)
            .collect();
        let mut list: Vec<Arc<Resource>> = all.iter().cloned().collect();
        list.sort_by(|a, b| b.name.cmp(&a.name));
        let forms = [
            (Picked::Every(all.clone()), vec!["a", "c", "e", "b", "d"]),
            (
                Picked::Named(all.clone(), Arc::new(names)),
                vec!["b", "c", "e"],
            ),
            (Picked::List(list), vec!["e", "d", "c", "b", "a"]),
        ];
        for (picked, expected) in forms {
            let all_at_once: Vec<_> = picked.iter().map(|r| r.name.to_string()).collect();
            assert_eq!(all_at_once, expected, "{picked:?}");
            assert_eq!(picked.len(), expected.len());
            // One at a time, each walk resuming at the place of the one after: the same order.
            let mut place = Place::default();
            let mut one_by_one = Vec::new();
            loop {
                let mut walk = picked.walk(&place);
                let Some((_, r)) = walk.next() else { break };
                one_by_one.push(r.name.to_string());
                let next = walk.next().map(|(i, r)| picked.place_of(i, r));
                drop(walk);
                match next {
                    Some(next) => place = next,
                    None => break,
                }
            }
            assert_eq!(one_by_one, expected, "{picked:?}");
        }
        assert!(Picked::Named(all, Arc::default()).is_empty());
    }
}
