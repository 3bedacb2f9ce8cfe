"""OpenWhisk's control logic, ported from apache/openwhisk: the controller's sharding balancer
(:mod:`testbed.openwhisk.balancer`) and each invoker's container pool
(:mod:`testbed.openwhisk.pool`) and the controller's view of each invoker's health
(:mod:`testbed.openwhisk.health`): the embedded lab's controller runs these classes, and the
simulator's compiled loop (:mod:`testbed.sim.openwhisk_kernel`) the same steps over arrays, held
to the Python loop over them that it replaced by test vectors; the one fault
rule every backend applies to a run (:mod:`testbed.openwhisk.faults`); what the modelled
deployment sets (:mod:`testbed.openwhisk.config`)."""
