//! Pools: which slices a node sees, incomplete and invalid pools, generations.

use super::*;

#[test]
fn pools_table() {
    let node_a = "node-a";
    run(vec![
        case(
            "simple",
            node_a,
            fx(vec![gpus(node_a, 2)], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["gpu-0"]]),
        ),
        case(
            "other node's slice is invisible",
            node_a,
            fx(vec![gpus("node-b", 2)], vec![one(req("r", "gpu"))]),
            Expect::Unsched("no-devices"),
        ),
        case(
            "newer generation shadows an older one",
            node_a,
            fx(
                vec![
                    slice("old", GPU, node_a, node_a)
                        .generation(1)
                        .device(dev("old-0")),
                    slice("new", GPU, node_a, node_a)
                        .generation(2)
                        .device(dev("new-0")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["new-0"]]),
        ),
        case(
            "incomplete pool ignored",
            node_a,
            fx(
                vec![
                    slice("p1-a", GPU, node_a, "p1").count(2).device(dev("inc-0")),
                    slice("p2", GPU, node_a, "p2").device(dev("ok-0")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["ok-0"]]),
        ),
        case(
            "only an incomplete pool",
            node_a,
            fx(
                vec![slice("p1-a", GPU, node_a, "p1").count(2).device(dev("inc-0"))],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Unsched("pools-incomplete"),
        ),
        case(
            "pool complete across two slices, sorted by slice name",
            node_a,
            fx(
                vec![
                    slice("p-b", GPU, node_a, "p").count(2).device(dev("b-0")),
                    slice("p-a", GPU, node_a, "p").count(2).device(dev("a-0")),
                ],
                vec![one(req("r", "gpu").count(2))],
            ),
            Expect::Devices(vec![vec!["a-0", "b-0"]]),
        ),
        case(
            "pools in (driver, pool) order",
            node_a,
            fx(
                vec![
                    slice("s1", GPU, node_a, "zz").device(dev("z-0")),
                    slice("s2", GPU, node_a, "aa").device(dev("a-0")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["a-0"]]),
        ),
        case(
            "duplicate device names make the pool invalid",
            node_a,
            fx(
                vec![
                    slice("p-a", GPU, node_a, "p").count(2).device(dev("dup")),
                    slice("p-b", GPU, node_a, "p").count(2).device(dev("dup")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::UnschedMsg("duplicate device name dup"),
        ),
        case(
            "missing counter set makes the pool invalid",
            node_a,
            fx(
                vec![slice("s", GPU, node_a, "p").device(dev("d").consumes("nope", &[("mem", "1")]))],
                vec![one(req("r", "gpu"))],
            ),
            Expect::UnschedMsg("counter set nope not found"),
        ),
        case(
            "invalid pool reported only when allocation fails",
            node_a,
            fx(
                vec![
                    slice("bad", GPU, node_a, "bad").device(dev("d").consumes("nope", &[("mem", "1")])),
                    slice("good", GPU, node_a, "good").device(dev("g")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["g"]]),
        ),
        case(
            "allNodes slice",
            node_a,
            fx(
                vec![slice("net", GPU, "x", "net").all_nodes().device(dev("n0"))],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["n0"]]),
        ),
        case(
            "nodeSelector slice that does not match",
            node_a,
            fx(
                vec![
                    slice("net", GPU, "x", "net")
                        .node_selector(label_selector(&[("rack", "r1")]))
                        .device(dev("n0")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Unsched("no-devices"),
        ),
        case(
            "perDeviceNodeSelection picks the node's device",
            node_a,
            fx(
                vec![
                    slice("pd", GPU, "x", "pd")
                        .per_device()
                        .device(dev("b0").on_node("node-b"))
                        .device(dev("a0").on_node(node_a)),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["a0"]]),
        ),
        case(
            "perDeviceNodeSelection allNodes device",
            node_a,
            fx(
                vec![
                    slice("pd", GPU, "x", "pd")
                        .per_device()
                        .device(dev("any").all_nodes()),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["any"]]),
        ),
    ]);

    // nodeSelector matching a labelled node.
    let f = fx(
        vec![
            slice("net", GPU, "x", "net")
                .node_selector(label_selector(&[("rack", "r1")]))
                .device(dev("n0")),
        ],
        vec![one(req("r", "gpu"))],
    );
    let got = f.allocate(&node_with_labels("node-a", &[("rack", "r1")]));
    check("nodeSelector match", &got, &Expect::Devices(vec![vec!["n0"]]));
    let sel = got.unwrap()[0].node_selector.clone().unwrap();
    let term = &sel.node_selector_terms[0];
    assert_eq!(
        term.match_expressions.as_ref().unwrap()[0].key,
        "rack",
        "result node selector copies the slice's"
    );
}
