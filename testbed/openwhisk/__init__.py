"""OpenWhisk's control logic, ported from apache/openwhisk: the controller's sharding balancer
(:mod:`testbed.openwhisk.balancer`) and each invoker's container pool
(:mod:`testbed.openwhisk.pool`) and the controller's view of each invoker's health
(:mod:`testbed.openwhisk.health`), shared by the simulator and the embedded lab; the one fault
rule every backend applies to a run (:mod:`testbed.openwhisk.faults`); what the modelled
deployment sets (:mod:`testbed.openwhisk.config`)."""
