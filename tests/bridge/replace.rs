//! Bridge scenarios for bend/replace.bend (being written).
