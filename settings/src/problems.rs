//! What is wrong with the environment: each problem by the variable it names, all of them together.

use std::fmt;

/// One thing wrong with the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A required variable is not set.
    Missing {
        /// The variable.
        name: &'static str,
    },
    /// A variable is set to something unusable.
    Invalid {
        /// The variable.
        name: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
}

impl Problem {
    /// The variable this problem is about.
    pub fn name(&self) -> &'static str {
        match self {
            Problem::Missing { name } | Problem::Invalid { name, .. } => name,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Missing { name: "DATABASE_URL" } => {
                f.write_str("DATABASE_URL is not set (nor DATABASE_SECRET_ARN)")
            }
            Problem::Missing { name } => write!(f, "{name} is not set"),
            Problem::Invalid { name, reason } => write!(f, "{name} {reason}"),
        }
    }
}

/// Why settings could not be loaded in AWS: the environment, or the database secret.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The environment.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The database secret.
    #[error(transparent)]
    Secret(#[from] platform::secrets::SecretError),
}

/// All problems found in one reading of the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SettingsError {
    /// Every problem, in the order the variables are read.
    pub problems: Vec<Problem>,
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(f, "invalid configuration ({n} problem{}): ", if n == 1 { "" } else { "s" })?;
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}
