//! Images of a Rollout's pod template: the first one, one replaced, one retagged.

use flotilla_core::spec::rollout::Rollout;

/// `image` with its tag (or digest) replaced by `version`.
pub(super) fn with_tag(image: &str, version: &str) -> String {
    let repository = match image.split_once('@') {
        Some((repository, _)) => repository,
        None => {
            let slash = image.rfind('/').map_or(0, |i| i + 1);
            match image[slash..].rfind(':') {
                Some(colon) => &image[..slash + colon],
                None => image,
            }
        }
    };
    if version.contains(':') {
        format!("{repository}@{version}")
    } else {
        format!("{repository}:{version}")
    }
}

pub(super) fn first_image(rollout: &Rollout) -> String {
    rollout.first_image().unwrap_or_default().to_owned()
}

pub(super) fn with_image(
    rollout: &Rollout,
    container: Option<&str>,
    image: &str,
) -> Result<Rollout, String> {
    let mut next = rollout.clone();
    let containers = next
        .spec
        .template
        .as_mut()
        .and_then(|t| t.spec.as_mut())
        .map(|s| &mut s.containers)
        .ok_or("the Rollout has no pod template")?;
    let target = match container {
        Some(name) => containers
            .iter_mut()
            .find(|c| c.name == name)
            .ok_or_else(|| format!("the Rollout has no container {name:?}"))?,
        None => containers
            .first_mut()
            .ok_or("the Rollout has no container")?,
    };
    target.image = Some(image.to_owned());
    Ok(next)
}
