//! "Does this device belong to that DeviceClass?" outside an allocation.
//!
//! Scoring needs it twice: NodeResourcesFit counts the devices of the class behind a DRA-backed
//! extended resource as the node's capacity for it (KEP-5004), and DeviceResources weighs device
//! usage per class. Both ask the same question the allocator asks first for every candidate device
//! (the class's CEL selectors), so this shares the allocator's per-slice result cache: a device
//! evaluated once for a selector is never evaluated again while its slice is unchanged.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::DeviceClass;

use crate::cel::{DeviceSelector, SelectorCompileError, SelectorEngine, SelectorEvalError, SelectorInput};
use crate::pools::PreparedSlice;

/// A DeviceClass's selectors, compiled.
#[derive(Clone, Debug)]
pub struct ClassSelector {
    selectors: Vec<Arc<dyn DeviceSelector>>,
}

impl ClassSelector {
    /// Compiles the class's selectors with `engine` (which caches compilations). A selector that
    /// is not CEL cannot be evaluated and is an error, as in the allocator.
    pub fn compile(class: &DeviceClass, engine: &dyn SelectorEngine) -> Result<Self, SelectorCompileError> {
        let mut selectors = Vec::new();
        for (i, s) in class
            .spec
            .iter()
            .flat_map(|spec| spec.selectors.iter().flatten())
            .enumerate()
        {
            let Some(cel) = &s.cel else {
                return Err(SelectorCompileError {
                    message: format!("selector #{i}: CEL expression empty (unsupported selector type?)"),
                });
            };
            selectors.push(engine.compile(&cel.expression)?);
        }
        Ok(ClassSelector { selectors })
    }

    /// Whether device `device` of `slice` satisfies every selector (a class without selectors
    /// matches every device).
    pub fn matches(&self, slice: &PreparedSlice, device: usize) -> Result<bool, SelectorEvalError> {
        let Ok(index) = u32::try_from(device) else {
            return Ok(false);
        };
        let Some(prepared) = slice.devices().get(device) else {
            return Ok(false);
        };
        for s in &self.selectors {
            if s.required_driver().is_some_and(|d| d != slice.driver()) {
                return Ok(false);
            }
            let matched = match slice.cached_match(s.id(), index) {
                Some(m) => m,
                None => {
                    let Some(api_device) = slice.api_device(device) else {
                        return Ok(false);
                    };
                    let m = s.matches(SelectorInput {
                        driver: slice.driver(),
                        device: api_device,
                        maps: slice.device_maps(device),
                        slot: &prepared.slot,
                        deadline: None,
                    })?;
                    slice.store_match(s.id(), index, m);
                    m
                }
            };
            if !matched {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::CelSelectorEngine;
    use crate::testing::{class, class_with, dev, slice};

    #[test]
    fn class_selectors_pick_devices() {
        let slice = PreparedSlice::new(Arc::new(
            slice("s", "gpu.example.com", "node-a", "pool")
                .device(dev("big").int("memory", 80))
                .device(dev("small").int("memory", 10))
                .build(),
        ));
        let engine = CelSelectorEngine::new();
        let cases: &[(&str, DeviceClass, [bool; 2])] = &[
            ("no selectors", class_with("any", &[]), [true, true]),
            ("driver", class("gpus", "gpu.example.com"), [true, true]),
            ("other driver", class("cpus", "cpu.example.com"), [false, false]),
            (
                "attribute",
                class_with("big", &["device.attributes[\"gpu.example.com\"].memory > 40"]),
                [true, false],
            ),
        ];
        for (name, c, want) in cases {
            let sel = ClassSelector::compile(c, &engine).unwrap();
            for (i, w) in want.iter().enumerate() {
                assert_eq!(sel.matches(&slice, i).unwrap(), *w, "{name}, device {i}");
                // Second answer comes from the slice's cache and must agree.
                assert_eq!(sel.matches(&slice, i).unwrap(), *w, "{name}, device {i} cached");
            }
            assert!(!sel.matches(&slice, 7).unwrap(), "{name}: out of range");
        }
    }

    #[test]
    fn invalid_cel_is_an_error() {
        let engine = CelSelectorEngine::new();
        assert!(ClassSelector::compile(&class_with("bad", &["device.driver =="]), &engine).is_err());
    }
}
