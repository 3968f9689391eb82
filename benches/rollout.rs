//! Rollout engine benchmark (core only): 100,000 rollout states advanced through one tick, and
//! the bytes of per-rollout state (the shared spec excluded). Run with
//! `cargo bench --bench rollout`.

use std::collections::BTreeMap;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use flotilla_core::rollout::{
    Observed, ReplicaCounts, RolloutState, Weights, reconcile, reconcile_with_hash, template_hash,
};
use flotilla_core::spec::rollout::Rollout;

fn rollout(image: &str) -> Rollout {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "svc"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "svc"}},
            "template": {"metadata": {"labels": {"app": "svc"}}, "spec": {"containers": [{"name": "app", "image": image}]}},
            "strategy": {"canary": {
                "canaryService": "c", "stableService": "s",
                "trafficRouting": {"plugins": {"flotilla/agent": {}}},
                "analysis": {"templates": [{"templateName": "success-rate"}]},
                "steps": [{"setWeight": 5}, {"pause": {"duration": "2m"}}, {"setWeight": 25}, {"pause": {"duration": "5m"}}, {"setWeight": 50}, {"pause": {}}]
            }}
        }
    }))
    .unwrap()
}

fn bench_tick(c: &mut Criterion) {
    let stable = rollout("svc:1.0");
    let canary = rollout("svc:2.0");
    let settled = Observed {
        replicas: [(
            1,
            ReplicaCounts {
                replicas: 4,
                ready: 4,
                available: 4,
            },
        )]
        .into_iter()
        .collect(),
        weights: Some(Weights {
            canary: 0,
            stable: 100,
        }),
        analysis: BTreeMap::new(),
        spec_replicas: None,
    };
    // 100,000 rollouts mid-canary: deployed, updated, at their first pause.
    let mut mid = Observed {
        replicas: settled.replicas.clone(),
        weights: Some(Weights {
            canary: 5,
            stable: 95,
        }),
        analysis: BTreeMap::new(),
        spec_replicas: None,
    };
    mid.replicas.insert(
        2,
        ReplicaCounts {
            replicas: 1,
            ready: 1,
            available: 1,
        },
    );
    let states: Vec<RolloutState> = (0..100_000)
        .map(|_| {
            let mut state = RolloutState::default();
            reconcile(&stable, &mut state, &settled, &[], 0);
            reconcile(&canary, &mut state, &settled, &[], 1_000);
            reconcile(&canary, &mut state, &mid, &[], 2_000);
            reconcile(&canary, &mut state, &mid, &[], 3_000);
            state
        })
        .collect();
    let hash = template_hash(&canary);
    let bytes = serde_json::to_vec(&states[0]).unwrap().len();
    let in_memory = std::mem::size_of::<RolloutState>();
    eprintln!(
        "per-rollout state: {bytes} bytes serialized, {in_memory} bytes inline (plus heap for its maps)"
    );
    let mut group = c.benchmark_group("rollout");
    group.sample_size(10);
    group.throughput(Throughput::Elements(states.len() as u64));
    group.bench_function("100,000 rollouts, one tick", |b| {
        b.iter_batched(
            || states.clone(),
            |mut states| {
                let mut actions = 0;
                for state in &mut states {
                    actions += reconcile_with_hash(&canary, &hash, state, &mid, &[], 60_000).len();
                }
                (states, actions)
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_tick);
criterion_main!(benches);
