//! The forest through the store: upstream's `workload_forest_test.go` cases (links added,
//! removed and ignored without the gate; root lookups, broken chains and loops) and the order a
//! tree's children are tried in.

use std::sync::Arc;

use k8s_openapi::{
    api::scheduling::{
        v1alpha3::{CompositePodGroup, CompositePodGroupSpec},
        v1beta1::{PodGroup, PodGroupSpec},
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};

use super::{GroupNodeKey, GroupTree, PodGroupKey, PodGroupStore};

fn meta(name: &str, created: Option<i64>) -> ObjectMeta {
    ObjectMeta {
        namespace: Some("ns".into()),
        name: Some(name.into()),
        creation_timestamp: created.map(|s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())),
        ..Default::default()
    }
}

fn pg(name: &str, parent: Option<&str>) -> Arc<PodGroup> {
    pg_at(name, parent, None)
}

fn pg_at(name: &str, parent: Option<&str>, created: Option<i64>) -> Arc<PodGroup> {
    Arc::new(PodGroup {
        metadata: meta(name, created),
        spec: PodGroupSpec {
            parent_composite_pod_group_name: parent.map(str::to_string),
            ..Default::default()
        },
        ..Default::default()
    })
}

fn cpg(name: &str, parent: Option<&str>) -> Arc<CompositePodGroup> {
    Arc::new(CompositePodGroup {
        metadata: meta(name, None),
        spec: CompositePodGroupSpec {
            parent_composite_pod_group_name: parent.map(str::to_string),
            ..Default::default()
        },
        ..Default::default()
    })
}

fn group(name: &str) -> GroupNodeKey {
    GroupNodeKey::Group(PodGroupKey::new("ns", name))
}

fn composite(name: &str) -> GroupNodeKey {
    GroupNodeKey::Composite(PodGroupKey::new("ns", name))
}

fn key(name: &str) -> PodGroupKey {
    PodGroupKey::new("ns", name)
}

#[test]
fn groups_are_linked_under_the_parent_they_name() {
    // "add pod group with parent, parent already has composite pod group child"
    let store = PodGroupStore::with_composites();
    store.set_composite(cpg("sub", Some("root")));
    store.set_group(pg("pg1", Some("root")));
    assert_eq!(store.children(&key("root")), vec![group("pg1"), composite("sub")]);
    // "add same pod group with parent again": still one link.
    store.set_group(pg("pg1", Some("root")));
    assert_eq!(store.children(&key("root")).len(), 2);
    assert_eq!(store.parent(&group("pg1")), Some(key("root")));
}

#[test]
fn without_the_gate_a_group_has_no_parent() {
    // "add pod group with parent, feature disabled"
    let store = PodGroupStore::new();
    store.set_group(pg("pg1", Some("root")));
    assert!(store.children(&key("root")).is_empty());
    assert_eq!(store.root_of(&group("pg1")), Some(group("pg1")));
    assert!(store.composite(&key("root")).is_none());
}

#[test]
fn deleting_a_child_unlinks_it_only() {
    // "delete pod group with parent, parent has other composite pod group children"
    let store = PodGroupStore::with_composites();
    store.set_composite(cpg("root", None));
    store.set_composite(cpg("sub", Some("root")));
    store.set_group(pg("pg1", Some("root")));
    store.remove_group(&key("pg1"));
    assert_eq!(store.children(&key("root")), vec![composite("sub")]);
    // "delete composite pod group with parent, cleans up children map"
    store.remove_composite(&key("sub"));
    assert!(store.children(&key("root")).is_empty());
    // "delete non-existent composite pod group"
    assert!(store.remove_composite(&key("nothing")).is_none());
}

#[test]
fn deleting_a_middle_composite_cuts_its_leaves_from_the_root() {
    // "delete mid cpg from root-mid-leaf hierarchy"
    let store = PodGroupStore::with_composites();
    store.set_composite(cpg("root", None));
    store.set_composite(cpg("mid", Some("root")));
    store.set_group(pg("leaf", Some("mid")));
    assert_eq!(store.root_of(&group("leaf")), Some(composite("root")));
    store.remove_composite(&key("mid"));
    assert!(store.children(&key("root")).is_empty());
    assert_eq!(
        store.children(&key("mid")),
        vec![group("leaf")],
        "the leaf still names it"
    );
    assert_eq!(store.root_of(&group("leaf")), None, "a broken chain has no root");
    store.set_composite(cpg("mid", Some("root")));
    assert_eq!(
        store.root_of(&group("leaf")),
        Some(composite("root")),
        "recreated, it is whole again"
    );
}

#[test]
fn root_lookups() {
    let store = PodGroupStore::with_composites();
    store.set_group(pg("alone", None));
    assert_eq!(
        store.root_of(&group("alone")),
        Some(group("alone")),
        "a group without parent is a root"
    );
    assert_eq!(
        store.root_of(&group("unknown")),
        None,
        "an unknown group has no root"
    );
    store.set_group(pg("orphan", Some("missing")));
    assert_eq!(
        store.root_of(&group("orphan")),
        None,
        "its parent is not there yet"
    );
    // A loop (the API server refuses it) has no root.
    store.set_composite(cpg("a", Some("b")));
    store.set_composite(cpg("b", Some("a")));
    store.set_group(pg("looped", Some("a")));
    assert_eq!(store.root_of(&group("looped")), None);
    assert_eq!(store.root_of(&composite("a")), None);
}

#[test]
fn children_are_tried_oldest_first_then_by_name() {
    let store = PodGroupStore::with_composites();
    store.set_composite(cpg("root", None));
    store.set_group(pg_at("b", Some("root"), Some(20)));
    store.set_group(pg_at("a", Some("root"), Some(20)));
    store.set_group(pg_at("c", Some("root"), Some(10)));
    store.set_group(pg_at("ghost-child", Some("absent"), Some(1)));
    let Some(GroupTree::Composite { children, .. }) = store.tree(&key("root")) else {
        panic!("a tree");
    };
    let names: Vec<String> = children.iter().map(|c| c.node_key().key().name.clone()).collect();
    assert_eq!(names, ["c", "a", "b"]);
    assert!(
        store.tree(&key("absent")).is_none(),
        "no tree under a composite not seen"
    );
}
