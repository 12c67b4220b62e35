//! The templates' sans-IO states: which snapshot version each restored,
//! whether its job shell waits (armed) and whether its shell said it is
//! ready; and the decisions over them: which shell takes a job, what a
//! run's end asks of the template, what a claim does with a spare's
//! template, and when a claimed spare's template goes. It holds the
//! driver's handle of each template (`T`: FIFOs and files in the kernel,
//! anything in tests) beside its state, so the two never part; writing to
//! the FIFOs, and whether a shell is still alive, stay the driver's.

/// Which of the two templates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The template over the current snapshot (or an older one, until the
    /// next is made).
    Current,
    /// A claimed spare's template over the blank state, whose waiting job
    /// shell restores the whole first snapshot.
    Claim,
}

/// Who takes a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taker {
    /// The current template's job shell; `arm_first`: none waits yet, so
    /// the driver asks for one before handing the job.
    Current { arm_first: bool },
    /// The claimed spare's waiting job shell.
    Claim,
    /// No template is ready: the kernel's shell restores the snapshot for
    /// the job itself.
    Shell,
}

impl Taker {
    /// The template that takes the job; `None`: the kernel's shell.
    pub fn slot(self) -> Option<Slot> {
        match self {
            Taker::Current { .. } => Some(Slot::Current),
            Taker::Claim => Some(Slot::Claim),
            Taker::Shell => None,
        }
    }
}

/// What a run's end asks of the templates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterEnd {
    /// The template is missing or restored an older snapshot: make one
    /// over the current snapshot.
    Make,
    /// The template is ready and no job shell waits: ask for one.
    Arm,
    Nothing,
}

/// One template: the driver's handle and where it stands.
pub struct Held<T> {
    pub handle: T,
    /// The snapshot version it restored.
    version: u64,
    /// A job shell waits for a job.
    armed: bool,
    /// Its shell said it is ready.
    reported: bool,
}

/// The snapshot's version and the two templates.
pub struct TemplateBook<T> {
    version: u64,
    current: Option<Held<T>>,
    claim: Option<Held<T>>,
}

impl<T> Default for TemplateBook<T> {
    fn default() -> Self {
        TemplateBook {
            version: 0,
            current: None,
            claim: None,
        }
    }
}

impl<T> TemplateBook<T> {
    /// The snapshot changed: the templates over the old one are stale.
    pub fn snapshot_changed(&mut self) {
        self.version += 1;
    }

    /// Whether the template is missing or restored an older snapshot.
    pub fn needs_template(&self) -> bool {
        self.current
            .as_ref()
            .is_none_or(|t| t.version != self.version)
    }

    /// The handle of the template in `slot`, if there is one.
    pub fn handle_mut(&mut self, slot: Slot) -> Option<&mut T> {
        self.slot_mut(slot).as_mut().map(|held| &mut held.handle)
    }

    fn slot_mut(&mut self, slot: Slot) -> &mut Option<Held<T>> {
        match slot {
            Slot::Current => &mut self.current,
            Slot::Claim => &mut self.claim,
        }
    }

    /// Take the current template out (to be retired, as a new one is made).
    pub fn take_current(&mut self) -> Option<T> {
        self.current.take().map(|held| held.handle)
    }

    /// A template was asked for over the current snapshot: its job shell
    /// is forked at once (armed), its shell not ready yet. The one it
    /// replaces, if any, comes back to be retired.
    pub fn made(&mut self, handle: T) -> Option<T> {
        let made = Held {
            handle,
            version: self.version,
            armed: true,
            reported: false,
        };
        self.current.replace(made).map(|old| old.handle)
    }

    /// The current template's shell said it is ready (`is_it` picks the
    /// template that said so): from here the claimed spare's template is
    /// no longer needed, and comes back to be retired.
    pub fn reported_ready(&mut self, is_it: impl FnOnce(&mut T) -> bool) -> Option<T> {
        let current = self.current.as_mut()?;
        if !is_it(&mut current.handle) {
            return None;
        }
        current.reported = true;
        self.claim.take().map(|held| held.handle)
    }

    /// Who takes the next job, and the templates' states once it is
    /// handed: a job shell that takes a job waits no more. `alive` says
    /// whether a template's shell still runs.
    pub fn take_job(&mut self, alive: impl Fn(&T) -> bool) -> Taker {
        let version = self.version;
        let ready =
            |held: &Held<T>| held.version == version && held.reported && alive(&held.handle);
        if let Some(current) = self.current.as_mut().filter(|t| ready(t)) {
            let arm_first = !current.armed;
            current.armed = false;
            return Taker::Current { arm_first };
        }
        if let Some(claim) = self.claim.as_mut().filter(|t| t.armed && ready(t)) {
            claim.armed = false;
            return Taker::Claim;
        }
        Taker::Shell
    }

    /// A run's end is on its way: what the templates need for the next.
    pub fn after_end(&self, alive: impl Fn(&T) -> bool) -> AfterEnd {
        if self.needs_template() {
            return AfterEnd::Make;
        }
        match &self.current {
            Some(t) if t.reported && alive(&t.handle) && !t.armed => AfterEnd::Arm,
            _ => AfterEnd::Nothing,
        }
    }

    /// The driver asked the current template for a job shell.
    pub fn armed(&mut self) {
        if let Some(current) = &mut self.current {
            current.armed = true;
        }
    }

    /// A spare's kernel is claimed: the snapshot becomes the session's
    /// first. The spare's template, made over the blank state, comes back
    /// for its scripts to be rewritten and its waiting job's bash to
    /// restore them ahead of the first job ([`TemplateBook::restored_ahead`]);
    /// a template over anything else stays where it is.
    pub fn claim(&mut self) -> Option<Held<T>> {
        let blank = self.version;
        self.version += 1;
        self.current.take_if(|t| t.version == blank)
    }

    /// The spare's template restores the first snapshot ahead: it serves
    /// as the claim's template until the session's own is ready.
    pub fn restored_ahead(&mut self, mut held: Held<T>) {
        held.version = self.version;
        self.claim = Some(held);
    }

    /// The session is idle: every template goes.
    pub fn drop_all(&mut self) -> Vec<T> {
        let current = self.current.take();
        [current, self.claim.take()]
            .into_iter()
            .flatten()
            .map(|held| held.handle)
            .collect()
    }
}

#[cfg(test)]
mod tests;
