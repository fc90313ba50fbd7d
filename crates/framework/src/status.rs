//! `Status`: what every extension point returns, and what each code does to the pod.
//!
//! The code decides the pod's fate, so each variant documents its consequence. Reasons are plain
//! strings kept stable on purpose: users, dashboards and autoscaler simulations match on them
//! (`Insufficient cpu`, `node(s) had untolerated taint {…}`), and building them lazily would cost
//! more than it saves.

use std::fmt;
use std::sync::Arc;

/// The outcome class of a plugin call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Code {
    /// The plugin ran and the pod may proceed.
    #[default]
    Success,
    /// An internal error (API failure, bug, unexpected input). The pod is requeued without rejector
    /// plugins, so it is retried after the error backoff rather than waiting for a cluster event.
    Error,
    /// The pod does not fit now. It goes to the unschedulable pool with this plugin recorded as a
    /// rejector; events the plugin registered can requeue it, and PostFilter (preemption) may help.
    Unschedulable,
    /// Like `Unschedulable`, but preemption on this node cannot help (e.g. a node selector mismatch),
    /// so PostFilter skips the node.
    UnschedulableAndUnresolvable,
    /// Permit only: the pod waits (with a timeout) before binding.
    Wait,
    /// PreFilter/PreScore: the coupled Filter/Score plugin has nothing to do for this pod and is
    /// skipped. Bind: try the next bind plugin.
    Skip,
    /// The pod waits for something outside the scheduler (e.g. a claim being allocated elsewhere).
    /// No backoff: a queueing hint from the pending plugin moves it straight back to activeQ.
    Pending,
}

impl Code {
    /// The upstream name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
            Code::Pending => "Pending",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a plugin call: a code, human-readable reasons, and which plugin said so.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    code: Code,
    reasons: Vec<String>,
    /// The error text for `Code::Error`, shown before the reasons.
    error: Option<String>,
    /// Shared: the framework hands every rejection of a plugin the same name.
    plugin: Option<Arc<str>>,
}

impl Status {
    /// Success, with no reasons.
    pub const fn success() -> Self {
        Status {
            code: Code::Success,
            reasons: Vec::new(),
            error: None,
            plugin: None,
        }
    }

    /// A status with the given code and reasons.
    pub fn new(code: Code, reasons: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Status {
            code,
            reasons: reasons.into_iter().map(Into::into).collect(),
            error: None,
            plugin: None,
        }
    }

    /// `Unschedulable` with one reason.
    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Self::new(Code::Unschedulable, [reason.into()])
    }

    /// `UnschedulableAndUnresolvable` with one reason.
    pub fn unresolvable(reason: impl Into<String>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, [reason.into()])
    }

    /// `Pending` with one reason.
    pub fn pending(reason: impl Into<String>) -> Self {
        Self::new(Code::Pending, [reason.into()])
    }

    /// `Skip`.
    pub fn skip() -> Self {
        Self::new(Code::Skip, Vec::<String>::new())
    }

    /// `Error` carrying an error message.
    pub fn error(err: impl fmt::Display) -> Self {
        Status {
            code: Code::Error,
            reasons: Vec::new(),
            error: Some(err.to_string()),
            plugin: None,
        }
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// True for `Success`.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// True for `Skip`.
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// True for the codes that reject a pod: Unschedulable, UnschedulableAndUnresolvable, Pending.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }

    /// The reasons, with the error text first when there is one.
    pub fn reasons(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.reasons.len() + 1);
        if let Some(e) = &self.error {
            out.push(e.clone());
        }
        out.extend(self.reasons.iter().cloned());
        out
    }

    /// The reasons joined by ", ".
    pub fn message(&self) -> String {
        self.reasons().join(", ")
    }

    /// Adds a reason.
    pub fn push_reason(&mut self, reason: impl Into<String>) {
        self.reasons.push(reason.into());
    }

    /// The plugin that produced the status (set by the framework for rejections).
    pub fn plugin(&self) -> Option<&str> {
        self.plugin.as_deref()
    }

    /// Records the plugin that produced the status.
    #[must_use]
    pub fn with_plugin(mut self, plugin: impl Into<Arc<str>>) -> Self {
        self.plugin = Some(plugin.into());
        self
    }

    /// Sets the plugin in place.
    pub fn set_plugin(&mut self, plugin: impl Into<Arc<str>>) {
        self.plugin = Some(plugin.into());
    }

    /// Returns a copy with a different code (used when the framework re-classifies a status).
    #[must_use]
    pub fn with_code(mut self, code: Code) -> Self {
        self.code = code;
        self
    }

    /// Wraps an error status with context, as the framework does when a plugin fails
    /// (`running "X" filter plugin: …`).
    #[must_use]
    pub fn wrap_error(self, context: impl fmt::Display) -> Self {
        let inner = self.message();
        Status {
            code: Code::Error,
            reasons: Vec::new(),
            error: Some(format!("{context}: {inner}")),
            plugin: self.plugin,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages() {
        let cases: Vec<(Status, Code, bool, &str)> = vec![
            (Status::success(), Code::Success, false, ""),
            (
                Status::unschedulable("Insufficient cpu"),
                Code::Unschedulable,
                true,
                "Insufficient cpu",
            ),
            (
                Status::unresolvable("x"),
                Code::UnschedulableAndUnresolvable,
                true,
                "x",
            ),
            (Status::pending("waiting"), Code::Pending, true, "waiting"),
            (Status::skip(), Code::Skip, false, ""),
            (Status::error("boom"), Code::Error, false, "boom"),
            (
                Status::new(Code::Unschedulable, ["Insufficient cpu", "Insufficient memory"]),
                Code::Unschedulable,
                true,
                "Insufficient cpu, Insufficient memory",
            ),
        ];
        for (status, code, rejected, message) in cases {
            assert_eq!(status.code(), code, "{status:?}");
            assert_eq!(status.is_rejected(), rejected, "{status:?}");
            assert_eq!(status.message(), message, "{status:?}");
        }
    }

    #[test]
    fn error_text_comes_first_and_wrap_keeps_plugin() {
        let mut s = Status::error("api down");
        s.push_reason("extra");
        assert_eq!(s.message(), "api down, extra");
        let w = Status::unschedulable("x")
            .with_plugin("P")
            .wrap_error("running \"P\" filter plugin");
        assert_eq!(w.code(), Code::Error);
        assert_eq!(w.plugin(), Some("P"));
        assert_eq!(w.message(), "running \"P\" filter plugin: x");
        assert_eq!(
            Code::UnschedulableAndUnresolvable.to_string(),
            "UnschedulableAndUnresolvable"
        );
    }
}
