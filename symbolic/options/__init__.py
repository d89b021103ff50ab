"""The planner's options: ``table`` defines each once (name, values, default, help, check, concern);
``records`` makes one frozen record per concern from it (shape, parallel, training, finetuning,
serving, implementation), which ``planning.regime.Regime`` holds."""
