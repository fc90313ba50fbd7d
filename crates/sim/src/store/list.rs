//! Lists with selectors and consistent paging.
//!
//! A continue token records the resourceVersion of the first page and the last key returned. Later
//! pages are served as of that resourceVersion: the current objects are rolled back with the retained
//! history (every event keeps the object's previous version). A token older than the history gets
//! 410 Gone, as an etcd-compacted token does.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::error::StoreError;
use crate::registry::KindId;
use crate::selector::{FieldSelector, LabelSelector};

use super::{Key, ObjectRef, Store};

/// Options of a list.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub label_selector: LabelSelector,
    /// `fieldSelector`.
    pub field_selector: FieldSelector,
    /// `limit`: at most this many items per page.
    pub limit: Option<usize>,
    /// `continue`: the token of the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion` (only meaningful with `resource_version_match: Exact`).
    pub resource_version: Option<String>,
    /// `resourceVersionMatch` (`Exact` serves the list as of `resource_version`).
    pub resource_version_match: Option<String>,
}

/// One page of a list.
#[derive(Clone, Debug)]
pub struct ObjectList {
    /// The resourceVersion the list is consistent with.
    pub resource_version: u64,
    /// The objects, in (namespace, name) order.
    pub items: Vec<ObjectRef>,
    /// The token for the next page, if there is one.
    pub continue_token: Option<String>,
    /// How many objects follow (only without selectors).
    pub remaining_item_count: Option<u64>,
}

fn parse_continue(token: &str) -> Result<(u64, Key), StoreError> {
    let bad = || StoreError::BadRequest(format!("invalid continue token {token:?}"));
    let mut parts = token.splitn(3, '/');
    let rv = parts.next().and_then(|r| r.parse::<u64>().ok()).ok_or_else(bad)?;
    let ns = parts.next().ok_or_else(bad)?;
    let name = parts.next().ok_or_else(bad)?;
    Ok((rv, (ns.to_string(), name.to_string())))
}

fn make_continue(rv: u64, key: &Key) -> String {
    format!("{rv}/{}/{}", key.0, key.1)
}

impl Store {
    pub(crate) fn list_in(
        &self,
        kind: KindId,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList, StoreError> {
        let (token_rv, start_after) = match opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
            Some(t) => {
                let (rv, key) = parse_continue(t)?;
                (Some(rv), Some(key))
            }
            None => (None, None),
        };
        let exact_rv = match (token_rv, opts.resource_version_match.as_deref()) {
            (Some(rv), _) => Some(rv),
            (None, Some("Exact")) => {
                let rv = opts.resource_version.as_deref().unwrap_or_default();
                Some(
                    rv.parse::<u64>()
                        .map_err(|_| StoreError::BadRequest(format!("invalid resourceVersion {rv:?}")))?,
                )
            }
            _ => None,
        };
        let st = self.state().read();
        let at = exact_rv.filter(|rv| *rv < st.rv);
        let first = st.first_rv();
        if let Some(rv) = at
            && rv + 1 < first
        {
            return Err(if token_rv.is_some() {
                StoreError::Gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a \
                     new list without the continue parameter."
                        .into(),
                )
            } else {
                StoreError::Gone(format!("too old resource version: {rv} ({})", first - 1))
            });
        }
        let list_rv = at.unwrap_or(st.rv);
        let map = &st.objects[kind.0];
        let lower: Bound<Key> = match (&start_after, namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let in_range = |k: &Key| -> bool {
            namespace.is_none_or(|ns| k.0 == ns) && start_after.as_ref().is_none_or(|s| k > s)
        };
        let merged: Option<BTreeMap<Key, ObjectRef>> = at.map(|rv| {
            let mut out: BTreeMap<Key, ObjectRef> = map
                .range((lower.clone(), Bound::Unbounded))
                .take_while(|(k, _)| namespace.is_none_or(|ns| k.0 == ns))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut seen: BTreeMap<Key, ()> = BTreeMap::new();
            let start = (rv + 1 - first) as usize;
            for ev in st.history.range(start.min(st.history.len())..) {
                if ev.kind != kind {
                    continue;
                }
                let key = (ev.object.namespace().to_string(), ev.object.name().to_string());
                if !in_range(&key) || seen.insert(key.clone(), ()).is_some() {
                    continue;
                }
                match &ev.previous {
                    Some(p) => out.insert(key, p.clone()),
                    None => out.remove(&key),
                };
            }
            out
        });
        let mut iter: Box<dyn Iterator<Item = (&Key, &ObjectRef)>> = match &merged {
            Some(m) => Box::new(m.iter()),
            None => Box::new(
                map.range((lower, Bound::Unbounded))
                    .take_while(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns)),
            ),
        };
        let limit = opts.limit.filter(|l| *l > 0);
        let filtered = !opts.label_selector.is_empty() || !opts.field_selector.is_empty();
        let mut items = Vec::new();
        let mut last: Option<Key> = None;
        let mut more = false;
        let mut remaining = 0u64;
        for (k, obj) in iter.by_ref() {
            if !opts.label_selector.matches(obj.value()) || !opts.field_selector.matches(obj.value()) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                remaining = 1;
                break;
            }
            items.push(obj.clone());
            last = Some(k.clone());
        }
        if more && !filtered {
            remaining += iter.count() as u64;
        }
        let continue_token = if more {
            last.as_ref().map(|k| make_continue(list_rv, k))
        } else {
            None
        };
        Ok(ObjectList {
            resource_version: list_rv,
            items,
            continue_token,
            remaining_item_count: (more && !filtered).then_some(remaining),
        })
    }
}
