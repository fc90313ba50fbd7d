//! Device attribute values as the claim constraints compare them, and the constraint state of
//! a search.
//!
//! `matchAttribute` needs every picked device to share a value and `distinctAttribute` needs
//! them all to differ. List-type attributes match by intersection, so each device's value is a
//! sorted set (a scalar is a singleton) and a match constraint keeps the running intersection
//! per pick, which makes undoing a pick exact. The per-node summary groups devices by a
//! borrowed scalar value instead, which compares exactly as the singleton sets do.

use k8s_openapi::api::resource::v1::DeviceAttribute;

use crate::pools::PreparedSlice;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum AttributeScalar {
    Int(i64),
    Bool(bool),
    Str(String),
    Version(String),
}

/// Attribute values as a sorted set (scalars are singletons).
pub(super) type AttributeSet = Vec<AttributeScalar>;

/// A scalar attribute value, borrowed: what the device summary groups `matchAttribute` devices
/// by (equal exactly when the [`AttributeScalar`]s are), without building a set per device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ScalarAttribute<'a> {
    Int(i64),
    Bool(bool),
    Str(&'a str),
    Version(&'a str),
}

/// The value [`attribute_set`] would give as a singleton, borrowed: `Ok(None)` where it gives
/// `None` (the device cannot join the match), `Err(())` for a list value (matched by
/// intersection; the summary leaves it to the search).
pub(super) fn scalar_attribute(
    attr: &DeviceAttribute,
    list_mode: bool,
) -> Result<Option<ScalarAttribute<'_>>, ()> {
    if let Some(v) = attr.int {
        return Ok(Some(ScalarAttribute::Int(v)));
    }
    if let Some(v) = attr.bool {
        return Ok(Some(ScalarAttribute::Bool(v)));
    }
    if let Some(v) = &attr.string {
        return Ok(Some(ScalarAttribute::Str(v)));
    }
    if let Some(v) = &attr.version {
        return Ok(Some(ScalarAttribute::Version(v)));
    }
    let lists = [
        attr.ints.as_ref().is_some_and(|v| !v.is_empty()),
        attr.bools.as_ref().is_some_and(|v| !v.is_empty()),
        attr.strings.as_ref().is_some_and(|v| !v.is_empty()),
        attr.versions.as_ref().is_some_and(|v| !v.is_empty()),
    ];
    if list_mode && lists.contains(&true) {
        return Err(());
    }
    Ok(None)
}

pub(super) fn attribute_set(attr: &DeviceAttribute, list_mode: bool) -> Option<AttributeSet> {
    let mut set: AttributeSet = if let Some(v) = attr.int {
        vec![AttributeScalar::Int(v)]
    } else if let Some(v) = attr.bool {
        vec![AttributeScalar::Bool(v)]
    } else if let Some(v) = &attr.string {
        vec![AttributeScalar::Str(v.clone())]
    } else if let Some(v) = &attr.version {
        vec![AttributeScalar::Version(v.clone())]
    } else if !list_mode {
        return None;
    } else if let Some(v) = attr.ints.as_ref().filter(|v| !v.is_empty()) {
        v.iter().map(|x| AttributeScalar::Int(*x)).collect()
    } else if let Some(v) = attr.bools.as_ref().filter(|v| !v.is_empty()) {
        v.iter().map(|x| AttributeScalar::Bool(*x)).collect()
    } else if let Some(v) = attr.strings.as_ref().filter(|v| !v.is_empty()) {
        v.iter().map(|x| AttributeScalar::Str(x.clone())).collect()
    } else if let Some(v) = attr.versions.as_ref().filter(|v| !v.is_empty()) {
        v.iter().map(|x| AttributeScalar::Version(x.clone())).collect()
    } else {
        return None;
    };
    set.sort();
    set.dedup();
    Some(set)
}

pub(super) fn intersect(a: &AttributeSet, b: &AttributeSet) -> AttributeSet {
    a.iter().filter(|x| b.binary_search(x).is_ok()).cloned().collect()
}

pub(super) fn intersects(a: &AttributeSet, b: &AttributeSet) -> bool {
    a.iter().any(|x| b.binary_search(x).is_ok())
}

pub(super) struct ConstraintState {
    pub(super) distinct: bool,
    pub(super) requests: Vec<String>,
    /// Match: intersection after each added device. Distinct: each added device's set.
    pub(super) stack: Vec<AttributeSet>,
}

impl ConstraintState {
    pub(super) fn applies(&self, request: &str, sub: Option<&str>) -> bool {
        if self.requests.is_empty() {
            return true;
        }
        self.requests.iter().any(|r| {
            r == request
                || sub
                    .is_some_and(|s| r.len() == request.len() + 1 + s.len() && *r == format!("{request}/{s}"))
        })
    }

    pub(super) fn add(&mut self, set: Option<&AttributeSet>) -> bool {
        let Some(set) = set else { return false };
        if self.distinct {
            if self.stack.iter().any(|prev| intersects(prev, set)) {
                return false;
            }
            self.stack.push(set.clone());
            return true;
        }
        match self.stack.last() {
            None => {
                self.stack.push(set.clone());
                true
            }
            Some(top) => {
                let inter = intersect(top, set);
                if inter.is_empty() {
                    return false;
                }
                self.stack.push(inter);
                true
            }
        }
    }
}

/// Looks up a fully qualified attribute; a name in the driver's domain also matches the bare id.
pub(super) fn device_attribute<'a>(
    slice: &'a PreparedSlice,
    dev: u32,
    name: &str,
) -> Option<&'a DeviceAttribute> {
    let maps = slice.device_maps(dev as usize);
    if let Some(a) = maps.attribute(name) {
        return Some(a);
    }
    let (domain, id) = name.split_once('/')?;
    if domain != slice.driver() {
        return None;
    }
    maps.attribute(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_refs_group_as_attribute_sets_compare() {
        let attrs = [
            DeviceAttribute {
                int: Some(3),
                ..Default::default()
            },
            DeviceAttribute {
                int: Some(4),
                ..Default::default()
            },
            DeviceAttribute {
                bool: Some(true),
                ..Default::default()
            },
            DeviceAttribute {
                string: Some("3".into()),
                ..Default::default()
            },
            DeviceAttribute {
                version: Some("3".into()),
                ..Default::default()
            },
            DeviceAttribute {
                string: Some("a".into()),
                ..Default::default()
            },
            DeviceAttribute {
                ints: Some(vec![3]),
                ..Default::default()
            },
            DeviceAttribute {
                ints: Some(vec![]),
                ..Default::default()
            },
            DeviceAttribute::default(),
        ];
        for list_mode in [false, true] {
            for a in &attrs {
                let set = attribute_set(a, list_mode);
                match scalar_attribute(a, list_mode) {
                    Ok(None) => assert_eq!(set, None, "{a:?}"),
                    Ok(Some(_)) => assert_eq!(set.as_ref().map(Vec::len), Some(1), "{a:?}"),
                    Err(()) => assert!(list_mode && set.is_some(), "{a:?}"),
                }
                for b in &attrs {
                    if let (Ok(Some(x)), Ok(Some(y))) =
                        (scalar_attribute(a, list_mode), scalar_attribute(b, list_mode))
                    {
                        assert_eq!(
                            x == y,
                            attribute_set(a, list_mode) == attribute_set(b, list_mode),
                            "{a:?} {b:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn attribute_sets() {
        let scalar = DeviceAttribute {
            int: Some(3),
            ..Default::default()
        };
        let list = DeviceAttribute {
            ints: Some(vec![3, 1, 3]),
            ..Default::default()
        };
        assert_eq!(attribute_set(&scalar, false), Some(vec![AttributeScalar::Int(3)]));
        assert_eq!(attribute_set(&list, false), None);
        assert_eq!(
            attribute_set(&list, true),
            Some(vec![AttributeScalar::Int(1), AttributeScalar::Int(3)])
        );
        let mut m = ConstraintState {
            distinct: false,
            requests: vec![],
            stack: vec![],
        };
        assert!(m.add(attribute_set(&list, true).as_ref()));
        assert!(m.add(attribute_set(&scalar, true).as_ref()));
        assert!(!m.add(Some(&vec![AttributeScalar::Int(1)])));
        m.stack.pop();
        assert!(
            m.add(Some(&vec![AttributeScalar::Int(1)])),
            "intersection restored on backtrack"
        );
        let mut dis = ConstraintState {
            distinct: true,
            requests: vec![],
            stack: vec![],
        };
        assert!(dis.add(Some(&vec![AttributeScalar::Int(1)])));
        assert!(!dis.add(Some(&vec![AttributeScalar::Int(1), AttributeScalar::Int(2)])));
        assert!(dis.add(Some(&vec![AttributeScalar::Str("1".into())])));
    }
}
