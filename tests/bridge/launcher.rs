//! Bridge scenarios for bend/launcher.bend (being written).
