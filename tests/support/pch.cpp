// Empty on purpose: rc_catch_main's other source (catch_main.cpp) cannot use the precompiled
// header, and a target with no source using it gets no rule to build the header that rc_tests and
// rc_engine_tests reuse (REUSE_FROM). This file gives it one.
