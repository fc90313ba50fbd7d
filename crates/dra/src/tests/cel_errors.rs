//! CEL errors in class and request selectors: which are fatal and how they read.

use super::*;

#[test]
fn cel_errors_table() {
    let n = "n";
    run(vec![
        case(
            "runtime error in a request selector is fatal and names request and expression",
            n,
            fx(vec![gpus(n, 2)], vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].nosuch == 1"#))]),
            Expect::Fatal(r#"request r: selector #0 "device.attributes[\"gpu.example.com\"].nosuch == 1" on device gpu.example.com/n/gpu-0: CEL runtime error: no such key"#),
        ),
        case(
            "runtime error in a class selector names the class",
            n,
            {
                let mut f = fx(vec![gpus(n, 2)], vec![one(req("r", "broken"))]);
                f.classes.push(class_with("broken", &[r#"device.attributes["gpu.example.com"].nosuch"#]));
                f
            },
            Expect::Fatal("class broken: selector #0"),
        ),
        case(
            "non-bool result is an error",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].index"#))]),
            Expect::Fatal("could not be converted to bool"),
        ),
        case(
            "compile error is fatal",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").selector("device.driver =="))]),
            Expect::Fatal("CEL compile error"),
        ),
        case(
            "driver prefilter avoids errors on other drivers' devices",
            n,
            {
                let mut f = fx(
                    vec![slice("o", "other.com", n, "o").device(dev("x")), gpus(n, 1)],
                    vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].model == "a100""#))],
                );
                // The class pins the driver, so the request selector is never evaluated for other.com.
                f.classes[0] = class("gpu", GPU);
                f
            },
            Expect::Devices(vec![vec!["gpu-0"]]),
        ),
        case(
            "unknown domain is an empty map",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").selector(r#"device.attributes["nope.com"].size() == 0"#))]),
            Expect::Devices(vec![vec!["gpu-0"]]),
        ),
        case(
            "cel.bind and quantity",
            n,
            fx(
                vec![slice("s", GPU, n, n).device(dev("small").cap("memory", "40Gi")).device(dev("big").cap("memory", "80Gi"))],
                vec![one(req("r", "gpu").selector(r#"cel.bind(c, device.capacity["gpu.example.com"], c.memory.compareTo(quantity("64Gi")) >= 0)"#))],
            ),
            Expect::Devices(vec![vec!["big"]]),
        ),
        case(
            "semver",
            n,
            fx(
                vec![slice("s", GPU, n, n).device(dev("old").version("driverVersion", "1.0.0")).device(dev("new").version("driverVersion", "2.1.0"))],
                vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("2.0.0"))"#))],
            ),
            Expect::Devices(vec![vec!["new"]]),
        ),
        case(
            "list attribute includes",
            n,
            fx(
                vec![slice("s", GPU, n, n).device(dev("a").strings("models", &["x"])).device(dev("b").strings("models", &["x", "y"]))],
                vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].models.includes("y")"#))],
            ),
            Expect::Devices(vec![vec!["b"]]),
        ),
        case(
            "allowMultipleAllocations visible",
            n,
            fx(
                vec![slice("s", GPU, n, n).device(dev("a")).device(dev("b").multi())],
                vec![one(req("r", "gpu").selector("device.allowMultipleAllocations"))],
            ),
            Expect::Devices(vec![vec!["b"]]),
        ),
    ]);
}
