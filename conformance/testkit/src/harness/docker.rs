//! The docker connection, the labels on everything the harness creates, and
//! the removal of it: per run on drop, and of dead processes' runs by [`sweep`];
//! commands run in a container, and its logs.

use std::collections::HashMap;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerSummary, Network};
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use futures::StreamExt;

use super::error::{HarnessError, Result};

/// The label on every container and network the harness creates (value `1`).
pub const LABEL: &str = "tenure.conformance";
/// The label naming the run (one [`Cluster`](super::Cluster)) a resource belongs to.
pub(crate) const RUN_LABEL: &str = "tenure.conformance.run";
/// The label naming the owning process as `host/pid/starttime`.
pub(crate) const OWNER_LABEL: &str = "tenure.conformance.owner";

/// Connects to the local engine (`DOCKER_HOST` or the unix socket) and
/// negotiates the API version, so older engines (20.10 speaks 1.41) work.
pub(crate) async fn connect() -> Result<Docker> {
    Ok(Docker::connect_with_local_defaults()?
        .negotiate_version()
        .await?)
}

/// The labels for a resource of `run`, owned by this process.
pub(crate) fn labels(run: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL.to_string(), "1".to_string()),
        (RUN_LABEL.to_string(), run.to_string()),
        (OWNER_LABEL.to_string(), owner_of_this_process()),
    ])
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// A process's start time in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`), which tells a live owner from a reused pid.
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it don't.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(19).map(str::to_string)
}

fn owner_of_this_process() -> String {
    let pid = std::process::id();
    format!(
        "{}/{}/{}",
        hostname(),
        pid,
        start_time(pid).unwrap_or_default()
    )
}

/// Whether the process named by an owner label is still running. Resources of
/// another host (a shared engine) are never judged dead; unlabelled ones are.
fn owner_alive(owner: Option<&String>) -> bool {
    let Some(owner) = owner else { return false };
    let mut parts = owner.splitn(3, '/');
    let (Some(host), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    if host != hostname() {
        return true;
    }
    match pid.parse::<u32>() {
        Ok(pid) => start_time(pid).is_some_and(|s| s == start),
        Err(_) => false,
    }
}

/// The ids of `resources` (their labels and id) whose owning process no
/// longer runs.
fn orphans(
    resources: impl Iterator<Item = (Option<HashMap<String, String>>, Option<String>)>,
) -> Vec<String> {
    resources
        .filter(|(labels, _)| !owner_alive(labels.as_ref().and_then(|l| l.get(OWNER_LABEL))))
        .filter_map(|(_, id)| id)
        .collect()
}

/// Containers and networks carrying the harness label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// Container names (without the leading `/`).
    pub containers: Vec<String>,
    /// Network names.
    pub networks: Vec<String>,
}

impl Leftovers {
    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.networks.is_empty()
    }
}

/// The containers (stopped ones too) and networks carrying `label`
/// (`key=value`).
async fn labelled(docker: &Docker, label: &str) -> Result<(Vec<ContainerSummary>, Vec<Network>)> {
    let filter = HashMap::from([("label", vec![label.to_string()])]);
    let containers = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filter)
                .build(),
        ))
        .await?;
    let networks = docker
        .list_networks(Some(
            ListNetworksOptionsBuilder::new().filters(&filter).build(),
        ))
        .await?;
    Ok((containers, networks))
}

/// Lists what the harness created and has not removed: of one run (see
/// [`Cluster::run_id`](super::Cluster::run_id)) or, with `None`, of all runs.
pub async fn leftovers(run: Option<&str>) -> Result<Leftovers> {
    let label = match run {
        Some(run) => format!("{RUN_LABEL}={run}"),
        None => format!("{LABEL}=1"),
    };
    let (containers, networks) = labelled(&connect().await?, &label).await?;
    Ok(Leftovers {
        containers: containers
            .into_iter()
            .flat_map(|c| c.names.unwrap_or_default())
            .map(|n| n.trim_start_matches('/').to_string())
            .collect(),
        networks: networks.into_iter().filter_map(|n| n.name).collect(),
    })
}

/// Where nodes keep their data: `/dev/shm/tenure-conformance/<run>/<node>`,
/// bind-mounted at `/data`. In memory, so a commit's fsync costs what the
/// servers' protocol costs and not what this machine's disk does (the suite
/// times hand-overs in milliseconds; a slow virtual disk made etcd's commits
/// the larger part of them), and kept across a node's kill and start, as a
/// disk is (a killed process loses nothing it wrote). `None` where there is
/// no /dev/shm, or where this process is not root (the servers, root in
/// their containers, write files there that it could not remove): nodes
/// then use an anonymous volume on docker's disk, which docker removes.
pub(crate) fn data_root() -> Option<std::path::PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let shm = std::path::Path::new("/dev/shm");
    (root && shm.is_dir()).then(|| shm.join("tenure-conformance"))
}

/// Creates run `run`'s data directory for `node`, recording this process as
/// its owner (for [`sweep`]); `None` where [`data_root`] has none or it
/// cannot be made.
pub(crate) fn data_dir(run: &str, node: &str) -> Option<std::path::PathBuf> {
    let run_dir = data_root()?.join(run);
    // The owner first: a sweep meanwhile may remove a run without one (then
    // the write or the node's directory fails, and the node uses a volume).
    std::fs::create_dir_all(&run_dir).ok()?;
    std::fs::write(run_dir.join("owner"), owner_of_this_process()).ok()?;
    let dir = run_dir.join(node);
    std::fs::create_dir(&dir)
        .or_else(|e| if dir.is_dir() { Ok(()) } else { Err(e) })
        .ok()?;
    Some(dir)
}

/// Removes run `run`'s data directories.
fn remove_data(run: &str) {
    if let Some(root) = data_root() {
        let _ = std::fs::remove_dir_all(root.join(run));
    }
}

/// Removes the data directories of runs whose process no longer runs.
fn sweep_data() -> usize {
    let Some(entries) = data_root().and_then(|root| std::fs::read_dir(root).ok()) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let owner = std::fs::read_to_string(entry.path().join("owner")).ok();
        if !owner_alive(owner.as_ref()) && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Removes every container and network the harness created for a process
/// that no longer runs (a test binary that was killed, or crashed in a way
/// that skipped `Drop`). Runs of live processes, such as test binaries running
/// in parallel, are left alone. Returns how many resources were removed.
pub async fn sweep() -> Result<usize> {
    let docker = connect().await?;
    let (containers, networks) = labelled(&docker, &format!("{LABEL}=1")).await?;
    let mut removed = 0;
    for id in orphans(containers.into_iter().map(|c| (c.labels, c.id))) {
        removed += usize::from(remove_container(&docker, &id).await.is_ok());
    }
    for id in orphans(networks.into_iter().map(|n| (n.labels, n.id))) {
        removed += usize::from(remove_network(&docker, &id).await.is_ok());
    }
    if removed > 0 {
        tracing::info!(removed, "swept resources of dead harness runs");
    }
    Ok(removed + sweep_data())
}

/// Force-removes a container (running or paused) and its anonymous volumes.
pub(crate) async fn remove_container(docker: &Docker, id: &str) -> Result<()> {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes a network; retries while the engine still counts endpoints of
/// containers that are being removed.
pub(crate) async fn remove_network(docker: &Docker, id: &str) -> Result<()> {
    let mut attempts = 0;
    loop {
        match docker.remove_network(id).await {
            Ok(()) => return Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(()),
            Err(e) if attempts < 40 => {
                attempts += 1;
                tracing::debug!(error = %e, network = id, "network not removable yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs `cmd` in `container`, with `env` (`NAME=value`) set; its standard
/// output, or an error with its output unless it exits 0.
pub(crate) async fn exec(container: &str, cmd: Vec<String>, env: &[&str]) -> Result<String> {
    let docker = connect().await?;
    let options = CreateExecOptions {
        cmd: Some(cmd.clone()),
        env: Some(env.iter().map(|e| e.to_string()).collect()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..Default::default()
    };
    let exec = docker.create_exec(container, options).await?;
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let StartExecResults::Attached { mut output, .. } = docker.start_exec(&exec.id, None).await?
    {
        while let Some(chunk) = output.next().await {
            match chunk? {
                LogOutput::StdErr { message } => {
                    stderr.push_str(&String::from_utf8_lossy(&message))
                }
                other => stdout.push_str(&other.to_string()),
            }
        }
    }
    let code = docker.inspect_exec(&exec.id).await?.exit_code;
    if code != Some(0) {
        return Err(HarnessError::Protocol(format!(
            "{} in {container} (exit {code:?}): {stderr}{stdout}",
            cmd.join(" ")
        )));
    }
    Ok(stdout)
}

/// A container's stdout and stderr, the last `tail` lines (`None`: all).
pub(crate) async fn container_logs(
    docker: &Docker,
    id: &str,
    tail: Option<usize>,
) -> Result<String> {
    let tail = tail.map_or_else(|| "all".to_string(), |n| n.to_string());
    let options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .tail(&tail)
        .build();
    let mut stream = docker.logs(id, Some(options));
    let mut out = String::new();
    while let Some(chunk) = stream.next().await {
        out.push_str(&chunk?.to_string());
    }
    Ok(out)
}

/// Removes a run's containers and networks from synchronous code (`Drop`,
/// possibly while a test panics, possibly inside an async runtime): on a
/// thread of its own with its own runtime. With `dump_logs`, first prints the
/// last lines of each container's log to stderr. Falls back to the docker CLI
/// if the API path fails.
pub(crate) fn remove_run_blocking(run: &str, dump_logs: bool) {
    let run_owned = run.to_string();
    let outcome = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(remove_run(&run_owned, dump_logs))
    })
    .join();
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("tenure harness: cleanup of run {run} via the API failed ({e}); using the docker CLI");
            remove_run_with_cli(run);
        }
        Err(_) => remove_run_with_cli(run),
    }
    remove_data(run);
}

async fn remove_run(run: &str, dump_logs: bool) -> Result<()> {
    let docker = connect().await?;
    let (containers, networks) = labelled(&docker, &format!("{RUN_LABEL}={run}")).await?;
    for c in &containers {
        let Some(id) = &c.id else { continue };
        if dump_logs {
            let name = c
                .names
                .as_ref()
                .and_then(|n| n.first().cloned())
                .unwrap_or_else(|| id.clone());
            match container_logs(&docker, id, Some(200)).await {
                Ok(logs) => eprintln!("---- logs of {name} (last 200 lines) ----\n{logs}"),
                Err(e) => eprintln!("---- logs of {name} unavailable: {e}"),
            }
        }
    }
    for c in &containers {
        if let Some(id) = &c.id {
            remove_container(&docker, id).await?;
        }
    }
    for n in networks {
        if let Some(id) = n.id {
            remove_network(&docker, &id).await?;
        }
    }
    Ok(())
}

fn remove_run_with_cli(run: &str) {
    let filter = format!("label={RUN_LABEL}={run}");
    let script = format!(
        "docker ps -aq --filter '{filter}' | xargs -r docker rm -f -v >/dev/null; \
         docker network ls -q --filter '{filter}' | xargs -r docker network rm >/dev/null"
    );
    if let Err(e) = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .status()
    {
        eprintln!("tenure harness: could not clean up run {run}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_of_a_dead_run_is_swept_and_a_live_ones_kept() {
        let Some(root) = data_root() else { return };
        let live = format!("test-live-{}", std::process::id());
        let dead = format!("test-dead-{}", std::process::id());
        assert!(data_dir(&live, "n1").is_some());
        assert!(data_dir(&dead, "n1").is_some());
        // A pid that never runs: above the kernel's pid_max.
        let host = hostname();
        std::fs::write(root.join(&dead).join("owner"), format!("{host}/4194305/1")).unwrap();
        sweep_data();
        assert!(root.join(&live).join("n1").is_dir());
        assert!(!root.join(&dead).exists());
        remove_data(&live);
        assert!(!root.join(&live).exists());
    }

    #[test]
    fn this_process_is_alive_and_a_dead_pid_is_not() {
        assert!(owner_alive(Some(&owner_of_this_process())));
        let host = hostname();
        assert!(!owner_alive(Some(&format!(
            "{host}/{}/1",
            std::process::id()
        ))));
        assert!(!owner_alive(Some(&format!("{host}/4194304999/1"))));
        assert!(!owner_alive(None));
        assert!(owner_alive(Some(&"some-other-host/1/1".to_string())));
    }
}
