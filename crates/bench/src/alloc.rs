//! `allocResourceClaims`: allocates claims outside the scheduler, as upstream's op does before a
//! steady-state phase, so the cluster starts half or almost full.
//!
//! Deliberately simple: each claim starts at a random node (seeded) and takes the first node, in
//! order from there, with enough unused devices for its requests (`exactly.count`, default 1;
//! `firstAvailable` uses its first subrequest). Selectors, counters and capacities are not
//! evaluated: the workloads that use this op have identical devices of one class.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Value, json};

use crate::BenchError;

type DevKey = (String, String, String);

/// Splitmix64: a tiny seeded generator (no dependency needed for shuffling).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        usize::try_from(self.next() % n as u64).unwrap_or(0)
    }
}

fn requests(claim: &Value) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for r in claim["spec"]["devices"]["requests"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = r["name"].as_str().unwrap_or_default().to_string();
        if let Some(e) = r.get("exactly") {
            let n = e["count"].as_u64().unwrap_or(1).max(1);
            out.push((name, usize::try_from(n).unwrap_or(1)));
        } else if let Some(sub) = r["firstAvailable"].as_array().and_then(|a| a.first()) {
            let n = sub["count"].as_u64().unwrap_or(1).max(1);
            let sub_name = sub["name"].as_str().unwrap_or_default();
            out.push((format!("{name}/{sub_name}"), usize::try_from(n).unwrap_or(1)));
        }
    }
    out
}

fn allocated(claim: &Value) -> Vec<DevKey> {
    claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("driver"), s("pool"), s("device"))
        })
        .collect()
}

/// Plans the allocation of every unallocated claim of `namespace`, given every slice and every
/// claim (as JSON): returns (claim name, `status.allocation`) pairs.
pub(crate) fn plan(
    slices: &[&Value],
    claims: &[&Value],
    namespace: &str,
    seed: u64,
) -> Result<Vec<(String, Value)>, BenchError> {
    // Devices per node, in slice order.
    let mut by_node: BTreeMap<String, Vec<DevKey>> = BTreeMap::new();
    for v in slices {
        let Some(node) = v["spec"]["nodeName"].as_str() else {
            continue;
        };
        let driver = v["spec"]["driver"].as_str().unwrap_or_default();
        let pool = v["spec"]["pool"]["name"].as_str().unwrap_or_default();
        let devs = by_node.entry(node.to_string()).or_default();
        for d in v["spec"]["devices"].as_array().into_iter().flatten() {
            let name = d["name"].as_str().unwrap_or_default();
            devs.push((driver.to_string(), pool.to_string(), name.to_string()));
        }
    }
    let mut used: HashSet<DevKey> = HashSet::new();
    for c in claims {
        used.extend(allocated(c));
    }
    let nodes: Vec<(String, Vec<DevKey>)> = by_node.into_iter().collect();
    if nodes.is_empty() {
        return Err(BenchError::Workload(
            "allocResourceClaims: there are no ResourceSlices with a nodeName".into(),
        ));
    }
    let mut rng = Rng::new(seed ^ 0xa110c);
    let mut out = Vec::new();
    for v in claims
        .iter()
        .filter(|c| c["metadata"]["namespace"].as_str() == Some(namespace))
    {
        if !allocated(v).is_empty() {
            continue;
        }
        let name = v["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let reqs = requests(v);
        let needed: usize = reqs.iter().map(|r| r.1).sum();
        let start = rng.below(nodes.len());
        let mut placed = None;
        for k in 0..nodes.len() {
            let (node, devs) = &nodes[(start + k) % nodes.len()];
            let free: Vec<&DevKey> = devs.iter().filter(|d| !used.contains(*d)).take(needed).collect();
            if free.len() == needed {
                let mut it = free.into_iter();
                let mut results = Vec::new();
                for (req, n) in &reqs {
                    for _ in 0..*n {
                        if let Some(d) = it.next() {
                            results.push((req.clone(), d.clone()));
                        }
                    }
                }
                placed = Some((node.clone(), results));
                break;
            }
        }
        let Some((node, results)) = placed else {
            return Err(BenchError::Workload(format!(
                "allocResourceClaims: no node has {needed} free devices for claim {namespace}/{name}"
            )));
        };
        for (_, d) in &results {
            used.insert(d.clone());
        }
        let results: Vec<Value> = results
            .into_iter()
            .map(|(req, (driver, pool, device))| {
                json!({"request": req, "driver": driver, "pool": pool, "device": device})
            })
            .collect();
        out.push((
            name,
            json!({
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            }),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rng_is_seeded_and_bounded() {
        let mut a = Rng::new(1);
        let mut b = Rng::new(1);
        for _ in 0..100 {
            let x = a.below(7);
            assert!(x < 7);
            assert_eq!(x, b.below(7));
        }
        assert_eq!(Rng::new(3).below(0), 0);
    }

    #[test]
    fn plans_distinct_devices_and_reports_shortage() {
        let slice = |node: &str| {
            json!({"spec": {"nodeName": node, "driver": "d", "pool": {"name": node},
                "devices": [{"name": "a"}, {"name": "b"}]}})
        };
        let claim = |name: &str| {
            json!({"metadata": {"name": name, "namespace": "init"},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}}})
        };
        let (s1, s2) = (slice("n1"), slice("n2"));
        let claims: Vec<Value> = (0..4).map(|i| claim(&format!("c{i}"))).collect();
        let refs: Vec<&Value> = claims.iter().collect();
        let planned = plan(&[&s1, &s2], &refs, "init", 7).unwrap();
        assert_eq!(planned.len(), 4);
        let mut devices: Vec<String> = planned
            .iter()
            .map(|(_, a)| {
                let r = &a["devices"]["results"][0];
                format!(
                    "{}/{}",
                    r["pool"].as_str().unwrap(),
                    r["device"].as_str().unwrap()
                )
            })
            .collect();
        devices.sort();
        assert_eq!(devices, vec!["n1/a", "n1/b", "n2/a", "n2/b"]);
        let five: Vec<Value> = (0..5).map(|i| claim(&format!("c{i}"))).collect();
        let refs: Vec<&Value> = five.iter().collect();
        assert!(plan(&[&s1, &s2], &refs, "init", 7).is_err());
        assert!(plan(&[], &refs, "init", 7).is_err());
    }

    #[test]
    fn request_counts() {
        let c = json!({"spec": {"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": "x", "count": 2}},
            {"name": "b", "firstAvailable": [{"name": "s", "deviceClassName": "x"}]},
        ]}}});
        assert_eq!(requests(&c), vec![("a".to_string(), 2), ("b/s".to_string(), 1)]);
    }
}
