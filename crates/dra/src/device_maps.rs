//! A device's attributes and capacities, kept as short sorted lists outside the API object.
//!
//! `Device.attributes` and `Device.capacity` decode into `BTreeMap`s, and a `BTreeMap` with even
//! one entry allocates a whole leaf node with room for eleven: with the 1.37 value types that is
//! ~2.1 KB for the attributes and ~1.9 KB for the capacities of every device, most of it empty.
//! At 40,000 devices that was 160 MB of the scheduler's memory. The watch handler therefore takes
//! both maps out of each device as it arrives ([`split_device_maps`]) and the slice is stored
//! without them; the lists here, in the same name order, are what CEL selectors, `matchAttribute`
//! and the node-allocatable mapping read. [`restore_device_maps`] puts them back where a whole
//! object is needed again.
//!
//! The lists keep the API value types, so every reader sees exactly the values it would have
//! read from the maps.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, DeviceCapacity, ResourceSlice};

/// One device's attributes and capacities, each in name order (the order of the API maps).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceMaps {
    // Collected from the maps' exact-size iterators: no spare capacity.
    attributes: Vec<(String, DeviceAttribute)>,
    capacity: Vec<(String, DeviceCapacity)>,
}

/// An empty [`DeviceMaps`], for devices past the end of a list.
static EMPTY: DeviceMaps = DeviceMaps {
    attributes: Vec::new(),
    capacity: Vec::new(),
};

impl DeviceMaps {
    /// Moves `device`'s maps out, leaving `None` in their place.
    pub fn take(device: &mut Device) -> Self {
        DeviceMaps {
            attributes: device
                .attributes
                .take()
                .map(|m| m.into_iter().collect())
                .unwrap_or_default(),
            capacity: device
                .capacity
                .take()
                .map(|m| m.into_iter().collect())
                .unwrap_or_default(),
        }
    }

    /// A copy of `device`'s maps, leaving it as it is.
    pub fn of(device: &Device) -> Self {
        DeviceMaps {
            attributes: device
                .attributes
                .as_ref()
                .map(|m| m.clone().into_iter().collect())
                .unwrap_or_default(),
            capacity: device
                .capacity
                .as_ref()
                .map(|m| m.clone().into_iter().collect())
                .unwrap_or_default(),
        }
    }

    /// The shared empty value.
    pub fn empty() -> &'static DeviceMaps {
        &EMPTY
    }

    /// Attributes by fully qualified or bare name, in name order.
    pub fn attributes(&self) -> &[(String, DeviceAttribute)] {
        &self.attributes
    }

    /// Capacities by name, in name order.
    pub fn capacity(&self) -> &[(String, DeviceCapacity)] {
        &self.capacity
    }

    /// The attribute stored under exactly `name`.
    pub fn attribute(&self, name: &str) -> Option<&DeviceAttribute> {
        self.attributes
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| &self.attributes[i].1)
    }

    /// The capacity stored under exactly `name`.
    pub fn capacity_of(&self, name: &str) -> Option<&DeviceCapacity> {
        self.capacity
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| &self.capacity[i].1)
    }

    /// Puts the maps back on `device` (`None` for an empty map, as after [`DeviceMaps::take`]).
    pub fn restore(&self, device: &mut Device) {
        device.attributes = (!self.attributes.is_empty()).then(|| self.attributes.iter().cloned().collect());
        device.capacity = (!self.capacity.is_empty()).then(|| self.capacity.iter().cloned().collect());
    }
}

/// Takes every device's maps out of `slice`; the result is in device order.
pub fn split_device_maps(slice: &mut ResourceSlice) -> Arc<[DeviceMaps]> {
    slice
        .spec
        .devices
        .iter_mut()
        .flatten()
        .map(DeviceMaps::take)
        .collect()
}

/// A shared slice without its devices' maps, and the maps: split on a copy when some device
/// still carries one, else the same slice and empty maps (nothing copied).
pub fn split_shared_slice(slice: Arc<ResourceSlice>) -> (Arc<ResourceSlice>, Arc<[DeviceMaps]>) {
    if has_device_maps(&slice) {
        let mut stripped = (*slice).clone();
        let maps = split_device_maps(&mut stripped);
        return (Arc::new(stripped), maps);
    }
    let maps = slice
        .spec
        .devices
        .iter()
        .flatten()
        .map(|_| DeviceMaps::default())
        .collect();
    (slice, maps)
}

/// Whether any device of `slice` still carries a map.
pub fn has_device_maps(slice: &ResourceSlice) -> bool {
    slice
        .spec
        .devices
        .iter()
        .flatten()
        .any(|d| d.attributes.is_some() || d.capacity.is_some())
}

/// `slice` (as left by [`split_device_maps`]) with `maps` put back.
pub fn restore_device_maps(slice: &ResourceSlice, maps: &[DeviceMaps]) -> ResourceSlice {
    let mut whole = slice.clone();
    for (device, m) in whole.spec.devices.iter_mut().flatten().zip(maps) {
        m.restore(device);
    }
    whole
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{dev, slice};

    #[test]
    fn split_then_restore_gives_the_same_object() {
        let whole = slice("s", "gpu.example.com", "node-a", "pool")
            .device(
                dev("d0")
                    .string("model", "a100")
                    .int("gpu.example.com/index", 0)
                    .cap("memory", "40Gi"),
            )
            .device(dev("d1"))
            .build();
        assert!(has_device_maps(&whole));
        let api = whole.spec.devices.as_ref().unwrap();

        let mut stripped = whole.clone();
        let maps = split_device_maps(&mut stripped);
        assert!(!has_device_maps(&stripped));
        assert_eq!(maps.len(), 2);
        // Name order, as the maps iterate.
        let names: Vec<&str> = maps[0].attributes().iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["gpu.example.com/index", "model"]);
        let api_attrs = api[0].attributes.as_ref().unwrap();
        assert_eq!(maps[0].attribute("model"), api_attrs.get("model"));
        assert_eq!(maps[0].attribute("index"), None, "exact names only");
        assert_eq!(
            maps[0].capacity_of("memory"),
            api[0].capacity.as_ref().unwrap().get("memory")
        );
        assert_eq!(maps[0].capacity_of("nope"), None);
        assert_eq!(maps[1], DeviceMaps::default());

        assert_eq!(restore_device_maps(&stripped, &maps), whole);
        assert_eq!(DeviceMaps::of(&api[0]), maps[0]);
    }

    #[test]
    fn empty_maps_come_back_as_none() {
        let mut s = slice("s", "x.com", "n", "p").device(dev("d")).build();
        if let Some(d) = s.spec.devices.as_mut().and_then(|d| d.first_mut()) {
            d.attributes = Some(Default::default());
        }
        let maps = split_device_maps(&mut s);
        let back = restore_device_maps(&s, &maps);
        assert_eq!(back.spec.devices.unwrap()[0].attributes, None);
    }

    #[test]
    fn a_shared_slice_is_copied_only_when_it_has_maps() {
        let plain = Arc::new(
            slice("s", "x.com", "n", "p")
                .device(dev("a"))
                .device(dev("b"))
                .build(),
        );
        let (kept, maps) = split_shared_slice(plain.clone());
        assert!(Arc::ptr_eq(&kept, &plain));
        assert_eq!(&*maps, &[DeviceMaps::default(), DeviceMaps::default()]);

        let whole = Arc::new(slice("s", "x.com", "n", "p").device(dev("a").int("i", 1)).build());
        let (kept, maps) = split_shared_slice(whole.clone());
        assert!(!Arc::ptr_eq(&kept, &whole) && !has_device_maps(&kept));
        assert_eq!(restore_device_maps(&kept, &maps), *whole);
    }
}
