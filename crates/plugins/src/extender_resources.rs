//! The names of the extended resources scheduler extenders manage, checked as upstream checks
//! them with the rest of the configuration: a qualified name, and an extended resource name
//! (not native, not a quota `requests.` name). Here because the name syntax checks live in this
//! crate, beside NodeResourcesFit's `ignoredResources` which those names may become.

use unisched_framework::config::KubeSchedulerConfiguration;

use crate::helper::{invalid, qualified_name_errors, quote};

/// Every problem with an `extenders[i].managedResources[j].name`, upstream style.
pub(crate) fn managed_resource_name_errors(config: &KubeSchedulerConfiguration) -> Vec<String> {
    let mut errs = Vec::new();
    for (i, extender) in config.extenders.iter().enumerate() {
        for (j, resource) in extender.managed_resources.iter().enumerate() {
            let path = format!("extenders[{i}].managedResources[{j}].name");
            let name = &resource.name;
            let syntax = qualified_name_errors(name);
            if !syntax.is_empty() {
                errs.extend(syntax.into_iter().map(|e| invalid(&path, quote(name), e)));
                continue;
            }
            let extended = unisched_resource::is_extended_resource_name(name)
                && qualified_name_errors(&format!("requests.{name}")).is_empty();
            if !extended {
                errs.push(invalid(
                    &path,
                    quote(name),
                    "is an invalid extended resource name",
                ));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_resource_names_are_extended_resource_names() {
        let cases = [
            ("example.com/gpu", None),
            (
                "cpu",
                Some(
                    "extenders[0].managedResources[0].name: Invalid value: \"cpu\": is an invalid extended resource name",
                ),
            ),
            (
                "kubernetes.io/foo",
                Some(
                    "extenders[0].managedResources[0].name: Invalid value: \"kubernetes.io/foo\": is an invalid extended resource name",
                ),
            ),
            (
                "-bad/x",
                Some(
                    "extenders[0].managedResources[0].name: Invalid value: \"-bad/x\": prefix part a lowercase RFC 1123 subdomain",
                ),
            ),
        ];
        for (name, want) in cases {
            let yaml = format!("extenders: [{{urlPrefix: x, managedResources: [{{name: {name:?}}}]}}]");
            let config = KubeSchedulerConfiguration::from_yaml(&yaml).unwrap();
            let errs = managed_resource_name_errors(&config);
            match want {
                None => assert!(errs.is_empty(), "{name}: {errs:?}"),
                Some(w) => assert!(errs.iter().any(|e| e.starts_with(w)), "{name}: {errs:?}"),
            }
        }
    }
}
