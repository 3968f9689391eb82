//! Checks the Rollout's strategies and Experiments share: anti-affinity, a route's string
//! matches, and a reference to an analysis template with the arguments it needs.

use crate::lint::{INJECTED_ARGS, Index, Sink};
use crate::manifest::LoadedManifest;
use crate::spec::rollout::{AnalysisRunArgument, AnalysisTemplateRef, AntiAffinity};

/// Checks one analysis template reference and the arguments passed to it.
pub(super) type ArgsCheck<'a> =
    dyn Fn(&mut Sink, &str, &AnalysisTemplateRef, &[AnalysisRunArgument]) + 'a;

/// What both strategies check alike: the scale-down revision limit within the revision history
/// limit (default 10), and the anti-affinity between the stable and the new revision's pods.
pub(super) fn check_scale_down_and_anti_affinity(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    base: &str,
    scale_down_delay_revision_limit: Option<i32>,
    revision_history_limit: Option<i32>,
    anti_affinity: Option<&AntiAffinity>,
) {
    if let (Some(limit), Some(history)) = (
        scale_down_delay_revision_limit,
        revision_history_limit.or(Some(10)),
    ) && history < limit
    {
        sink.error(loaded, "argo/revision-limit", format!("{base}.scaleDownDelayRevisionLimit"), "This rollout's revision history limit can not be smaller than the rollout's scale down limit");
    }
    check_anti_affinity(sink, loaded, &format!("{base}.antiAffinity"), anti_affinity);
}

fn check_anti_affinity(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    path: &str,
    anti_affinity: Option<&AntiAffinity>,
) {
    let Some(anti_affinity) = anti_affinity else {
        return;
    };
    let preferred = anti_affinity
        .preferred_during_scheduling_ignored_during_execution
        .as_ref();
    let required = anti_affinity
        .required_during_scheduling_ignored_during_execution
        .as_ref();
    if preferred.is_some() == required.is_some() {
        sink.error(
            loaded,
            "argo/anti-affinity",
            path.to_owned(),
            "AntiAffinity must have exactly one strategy listed",
        );
    }
    if let Some(preferred) = preferred
        && !(1..=100).contains(&preferred.weight)
    {
        sink.error(
            loaded,
            "argo/anti-affinity",
            format!("{path}.preferredDuringSchedulingIgnoredDuringExecution.weight"),
            "AntiAffinity weight must be between 1-100",
        );
    }
}

pub(super) fn check_string_match(
    sink: &mut Sink,
    loaded: &LoadedManifest,
    path: String,
    value: &crate::spec::rollout::StringMatch,
    alb: bool,
) {
    let set = [
        value.exact.is_some(),
        value.prefix.is_some(),
        value.regex.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if alb {
        if value.exact.as_deref().is_none_or(str::is_empty)
            || value.prefix.is_some()
            || value.regex.is_some()
        {
            sink.error(
                loaded,
                "argo/string-match",
                path,
                "SetHeaderRoute match value invalid. ALB supports 'exact' value only",
            );
        }
    } else if set == 0 {
        sink.error(loaded, "argo/string-match", path, "StringMatch value missed, match value must have one of the following: exact, regex, prefix");
    } else if set > 1 {
        sink.error(
            loaded,
            "argo/string-match",
            path,
            "StringMatch match value must have exactly one of the following: exact, regex, prefix",
        );
    }
}

/// Checks that a referenced template exists among the linted files (a warning otherwise: it may
/// exist where the rollout runs) and that every argument it needs is supplied.
pub(super) fn check_template_ref(
    index: &Index<'_>,
    sink: &mut Sink,
    loaded: &LoadedManifest,
    path: &str,
    name: &str,
    cluster_scope: bool,
    args: &[AnalysisRunArgument],
) {
    let kind = if cluster_scope {
        "ClusterAnalysisTemplate"
    } else {
        "AnalysisTemplate"
    };
    let Some((_, template)) = index.template(name, cluster_scope) else {
        sink.warn(
            loaded,
            "ref/template-not-found",
            format!("{path}.templateName"),
            format!("{kind} {name:?} is not among the linted files (it may exist where the rollout runs; --strict makes this an error)"),
        );
        return;
    };
    let overridden = index.overridden_args(loaded.manifest.name());
    for arg in &template.spec.args {
        let has_default = arg.value.is_some() || arg.value_from.is_some();
        let supplied = args.iter().any(|a| a.name == arg.name)
            || INJECTED_ARGS.contains(&arg.name.as_str())
            || overridden.contains(arg.name.as_str());
        if !has_default && !supplied {
            sink.error(
                loaded,
                "args/unresolved",
                path.to_owned(),
                format!("args.{} was not resolved: {kind} {name:?} declares it without a value and this reference does not pass it", arg.name),
            );
        }
    }
}
