//! Slices shaped like real drivers' (see the ecosystem notes): dra-driver-cpu, dra-example-driver,
//! NVIDIA (static and dynamic MIG) and the memory/hugepages driver.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};

use crate::testing::{Fixture, device_names, node};
use crate::{AllocationError, Features};

fn yaml<T: k8s_openapi::serde::de::DeserializeOwned>(s: &str) -> T {
    serde_yaml::from_str(s).unwrap()
}

fn fixture(slices: &[&str], classes: &[&str], claims: &[&str]) -> Fixture {
    Fixture {
        slices: slices.iter().map(|s| yaml::<ResourceSlice>(s)).collect(),
        classes: classes.iter().map(|s| yaml::<DeviceClass>(s)).collect(),
        claims: claims.iter().map(|s| yaml::<ResourceClaim>(s)).collect(),
        features: Features::default(),
        ..Default::default()
    }
}

const CPU_SLICE: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: { name: worker-1-dra.cpu-abcde }
spec:
  driver: dra.cpu
  nodeName: worker-1
  pool: { name: worker-1, generation: 1, resourceSliceCount: 1 }
  devices:
  - name: cpudevnuma000
    allowMultipleAllocations: true
    attributes:
      resource.kubernetes.io/numaNode: { int: 0 }
      dra.cpu/socketID:   { int: 0 }
      dra.cpu/numCPUs:    { int: 64 }
      dra.cpu/smtEnabled: { bool: true }
    capacity:
      dra.cpu/cpu: { value: "64" }
    nodeAllocatableResources:
      cpu:
        mapping: { capacityKey: dra.cpu/cpu, capacityMultiplier: "1" }
  - name: cpudevnuma001
    allowMultipleAllocations: true
    attributes:
      resource.kubernetes.io/numaNode: { int: 1 }
      dra.cpu/socketID:   { int: 0 }
      dra.cpu/numCPUs:    { int: 64 }
      dra.cpu/smtEnabled: { bool: true }
    capacity:
      dra.cpu/cpu: { value: "64" }
"#;

const CPU_CLASS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: { name: dra.cpu }
spec:
  selectors:
  - cel: { expression: 'device.driver == "dra.cpu"' }
"#;

const CPU_CLAIM: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: { name: cpus, namespace: default, uid: 5a4b }
spec:
  devices:
    requests:
    - name: cpus
      exactly:
        deviceClassName: dra.cpu
        capacity: { requests: { dra.cpu/cpu: "8" } }
        selectors:
        - cel: { expression: 'device.attributes["resource.kubernetes.io"].numaNode == 1' }
"#;

#[test]
fn dra_driver_cpu_grouped_mode() {
    let f = fixture(&[CPU_SLICE], &[CPU_CLASS], &[CPU_CLAIM]);
    let res = f.allocate(&node("worker-1")).unwrap();
    let r = &res[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert_eq!(
        (r.driver.as_str(), r.pool.as_str(), r.device.as_str()),
        ("dra.cpu", "worker-1", "cpudevnuma001")
    );
    assert_eq!(r.consumed_capacity.as_ref().unwrap()["dra.cpu/cpu"].0, "8");
    assert!(r.share_id.is_some());
    assert!(matches!(
        f.allocate(&node("worker-2")),
        Err(AllocationError::Unschedulable(_))
    ));
}

const EXAMPLE_GPU_SLICE: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: { name: worker-gpu.example.com-rf2f7 }
spec:
  driver: gpu.example.com
  nodeName: worker
  pool: { name: worker, generation: 0, resourceSliceCount: 1 }
  devices:
  - name: gpu-0
    attributes:
      driverVersion: { version: 1.0.0 }
      index: { int: 0 }
      model: { string: LATEST-GPU-MODEL }
      uuid:  { string: gpu-18db0e85-99e9-c746-8531-ffeb86328b39 }
    capacity:
      memory: { value: 80Gi }
  - name: gpu-1
    attributes:
      driverVersion: { version: 1.0.0 }
      index: { int: 1 }
      model: { string: LATEST-GPU-MODEL }
      uuid:  { string: gpu-9ab0e85-99e9-c746-8531-ffeb86328b40 }
    capacity:
      memory: { value: 80Gi }
"#;

const EXAMPLE_CLASS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: { name: gpu.example.com }
spec:
  selectors:
  - cel: { expression: "device.driver == 'gpu.example.com'" }
"#;

const EXAMPLE_CLAIM: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: { name: two-gpus, namespace: default }
spec:
  devices:
    requests:
    - name: gpus
      exactly:
        deviceClassName: gpu.example.com
        count: 2
        selectors:
        - cel:
            expression: |-
              device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0 &&
              device.attributes['gpu.example.com'].driverVersion.isGreaterThan(semver('0.9.0'))
    config:
    - requests: [gpus]
      opaque:
        driver: gpu.example.com
        parameters:
          apiVersion: gpu.resource.example.com/v1alpha1
          kind: GpuConfig
          sharing: { strategy: TimeSlicing }
"#;

#[test]
fn dra_example_driver_gpus() {
    let f = fixture(&[EXAMPLE_GPU_SLICE], &[EXAMPLE_CLASS], &[EXAMPLE_CLAIM]);
    let res = f.allocate(&node("worker")).unwrap();
    assert_eq!(device_names(&res[0]), vec!["gpu-0", "gpu-1"]);
    let config = res[0].devices.as_ref().unwrap().config.as_ref().unwrap();
    assert_eq!(config[0].source, "FromClaim");
    assert_eq!(config[0].requests, None, "applies to every request");
}

/// NVIDIA dynamic MIG: one counter set per GPU in its own slice, full GPU and MIG placements
/// consuming from it.
const NVIDIA_COUNTERS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: { name: gpu-node-1-counters }
spec:
  driver: gpu.nvidia.com
  nodeName: gpu-node-1
  pool: { name: gpu-node-1, generation: 1, resourceSliceCount: 2 }
  sharedCounters:
  - name: gpu-0-counter-set
    counters:
      memory: { value: 96Gi }
      multiprocessors: { value: "132" }
      memory-slice-0: { value: "1" }
      memory-slice-1: { value: "1" }
"#;

const NVIDIA_DEVICES: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: { name: gpu-node-1-devices }
spec:
  driver: gpu.nvidia.com
  nodeName: gpu-node-1
  pool: { name: gpu-node-1, generation: 1, resourceSliceCount: 2 }
  devices:
  - name: gpu-0
    attributes:
      type: { string: gpu }
      productName: { string: NVIDIA GH200 96GB HBM3 }
      cudaComputeCapability: { version: 9.0.0 }
    capacity:
      memory: { value: 96Gi }
    consumesCounters:
    - counterSet: gpu-0-counter-set
      counters:
        memory: { value: 96Gi }
        multiprocessors: { value: "132" }
        memory-slice-0: { value: "1" }
        memory-slice-1: { value: "1" }
  - name: gpu-0-mig-1g12gb-19-0
    attributes:
      type: { string: mig }
      profile: { string: 1g.12gb }
    capacity:
      memory: { value: 11Gi }
      multiprocessors: { value: "16" }
    consumesCounters:
    - counterSet: gpu-0-counter-set
      counters:
        memory: { value: 12Gi }
        multiprocessors: { value: "16" }
        memory-slice-0: { value: "1" }
  - name: gpu-0-mig-1g12gb-19-1
    attributes:
      type: { string: mig }
      profile: { string: 1g.12gb }
    capacity:
      memory: { value: 11Gi }
      multiprocessors: { value: "16" }
    consumesCounters:
    - counterSet: gpu-0-counter-set
      counters:
        memory: { value: 12Gi }
        multiprocessors: { value: "16" }
        memory-slice-1: { value: "1" }
"#;

const MIG_CLASS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: { name: mig.nvidia.com }
spec:
  selectors:
  - cel: { expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'" }
"#;

const GPU_CLASS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: { name: gpu.nvidia.com }
spec:
  extendedResourceName: nvidia.com/gpu
  selectors:
  - cel: { expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'" }
"#;

fn claim_yaml(name: &str, class: &str, count: u32, selector: &str) -> String {
    format!(
        r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{ name: {name}, namespace: default }}
spec:
  devices:
    requests:
    - name: r
      exactly:
        deviceClassName: {class}
        count: {count}
        selectors:
        - cel: {{ expression: "{selector}" }}
"#
    )
}

#[test]
fn nvidia_dynamic_mig() {
    let two_migs = claim_yaml(
        "migs",
        "mig.nvidia.com",
        2,
        "device.attributes['gpu.nvidia.com'].profile == '1g.12gb'",
    );
    let whole = claim_yaml("whole", "gpu.nvidia.com", 1, "true");
    let f = fixture(
        &[NVIDIA_COUNTERS, NVIDIA_DEVICES],
        &[MIG_CLASS, GPU_CLASS],
        &[&two_migs],
    );
    let res = f.allocate(&node("gpu-node-1")).unwrap();
    assert_eq!(
        device_names(&res[0]),
        vec!["gpu-0-mig-1g12gb-19-0", "gpu-0-mig-1g12gb-19-1"]
    );
    // With both MIG slices taken, the full GPU's counters are gone.
    let mut f = fixture(
        &[NVIDIA_COUNTERS, NVIDIA_DEVICES],
        &[MIG_CLASS, GPU_CLASS],
        &[&whole],
    );
    let mut taken: ResourceClaim = yaml(&two_migs);
    taken.status = Some(k8s_openapi::api::resource::v1::ResourceClaimStatus {
        allocation: Some(res[0].clone()),
        ..Default::default()
    });
    f.allocated = vec![taken];
    match f.allocate(&node("gpu-node-1")) {
        Err(AllocationError::Unschedulable(u)) => assert_eq!(u.reason.kind(), "counters", "{u}"),
        other => panic!("{other:?}"),
    }
    // Both in one pod: the full GPU and a MIG device cannot coexist.
    let f = fixture(
        &[NVIDIA_COUNTERS, NVIDIA_DEVICES],
        &[MIG_CLASS, GPU_CLASS],
        &[&whole, &claim_yaml("one", "mig.nvidia.com", 1, "true")],
    );
    assert!(matches!(
        f.allocate(&node("gpu-node-1")),
        Err(AllocationError::Unschedulable(_))
    ));
}

const HUGEPAGES_SLICE: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: { name: worker-1-hp2m }
spec:
  driver: dra.memory
  nodeName: worker-1
  pool: { name: worker-1-hugepages-2m, generation: 1, resourceSliceCount: 1 }
  devices:
  - name: hugepages-2m-x7k2p9
    allowMultipleAllocations: true
    attributes:
      resource.kubernetes.io/numaNode: { int: 0 }
      resource.kubernetes.io/pageSize: { string: 2m }
      resource.kubernetes.io/hugeTLB:  { bool: true }
      dra.cpu/numaNodeID: { int: 0 }
    capacity:
      size:
        value: 4Gi
        requestPolicy: { default: 2Mi, validRange: { min: 2Mi, step: 2Mi, max: 4Gi } }
"#;

const HUGEPAGES_CLASS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: { name: dra.hugepages-2m }
spec:
  selectors:
  - cel: { expression: 'device.driver == "dra.memory" && device.attributes["resource.kubernetes.io"].pageSize == "2m"' }
"#;

#[test]
fn memory_driver_hugepages() {
    let claim = |name: &str, size: &str| {
        format!(
            r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{ name: {name}, namespace: default }}
spec:
  devices:
    requests:
    - name: hp
      exactly:
        deviceClassName: dra.hugepages-2m
        capacity: {{ requests: {{ size: {size} }} }}
"#
        )
    };
    let a = claim("a", "3Gi");
    let b = claim("b", "1025Mi");
    let f = fixture(&[HUGEPAGES_SLICE], &[HUGEPAGES_CLASS], &[&a]);
    let res = f.allocate(&node("worker-1")).unwrap();
    let r = &res[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert_eq!(r.consumed_capacity.as_ref().unwrap()["size"].0, "3Gi");
    // 3Gi + 1026Mi (1025Mi rounded up to the 2Mi grid) > 4Gi.
    let f = fixture(&[HUGEPAGES_SLICE], &[HUGEPAGES_CLASS], &[&a, &b]);
    assert!(matches!(
        f.allocate(&node("worker-1")),
        Err(AllocationError::Unschedulable(_))
    ));
    let c = claim("c", "1000Mi");
    let f = fixture(&[HUGEPAGES_SLICE], &[HUGEPAGES_CLASS], &[&a, &c]);
    let res = f.allocate(&node("worker-1")).unwrap();
    assert_eq!(
        res[1].devices.as_ref().unwrap().results.as_ref().unwrap()[0]
            .consumed_capacity
            .as_ref()
            .unwrap()["size"]
            .0,
        "1000Mi"
    );
    let _ = Arc::new(());
}
