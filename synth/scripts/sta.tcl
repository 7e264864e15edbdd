# mactile timing and power: worst setup slack at the target clock and report_power.
#
# Runs in OpenSTA (Debian's 2019 `sta` and newer) and in OpenROAD, which embeds OpenSTA:
# it uses only commands both have, and reads a LEF first where the tool needs one
# (OpenROAD links a netlist against LEF masters). The caller sets the array `mactile`
# before sourcing this file:
#   liberty netlist top        files and the top module
#   lef                        LEF file or "" (read only when the tool has read_lef)
#   clock_port clock_ns        clock input ("" for a combinational design: virtual clock)
#   activity                   ports | vcd | global | pin_energies
#   activity_tcl               file of set_power_activity commands (ports)
#   vcd vcd_scope              simulation dump and its top scope (vcd)
#   global_activity global_duty                      (global, pin_energies)
# It prints machine-readable lines starting with MACTILE for mactile.synth.flow.

proc mactile_main {} {
    global mactile
    if {$mactile(lef) ne "" && [llength [info commands read_lef]]} {
        read_lef $mactile(lef)
    }
    read_liberty $mactile(liberty)
    read_verilog $mactile(netlist)
    link_design $mactile(top)

    # Constraints: one clock; inputs arrive and outputs are captured at its edges, so
    # every register-to-register, input-to-register, register-to-output and
    # input-to-output path must fit in one period.
    set period $mactile(clock_ns)
    if {$mactile(clock_port) ne ""} {
        create_clock -name clk -period $period [get_ports $mactile(clock_port)]
        set data_inputs [list]
        foreach port [all_inputs] {
            if {[get_full_name $port] ne $mactile(clock_port)} { lappend data_inputs $port }
        }
    } else {
        create_clock -name clk -period $period
        set data_inputs [all_inputs]
    }
    if {[llength $data_inputs]} { set_input_delay 0 -clock clk $data_inputs }
    if {[llength [all_outputs]]} { set_output_delay 0 -clock clk [all_outputs] }

    puts "MACTILE_SECTION timing"
    report_checks -path_delay max -digits 4
    report_worst_slack -digits 6

    # Switching activity, then power.
    switch -- $mactile(activity) {
        ports  { source $mactile(activity_tcl) }
        vcd    { read_vcd -scope $mactile(vcd_scope) $mactile(vcd) }
        global { set_power_activity -global -activity $mactile(global_activity) \
                     -duty $mactile(global_duty) }
        pin_energies {
            # Every pin's power at one uniform activity, printed per pin for
            # mactile.synth.pinpower, which rescales each by its net's simulated rate.
            set_power_activity -global -activity $mactile(global_activity) \
                -duty $mactile(global_duty)
            sta::set_debug power 2
        }
        default { error "unknown activity method $mactile(activity)" }
    }
    puts "MACTILE_SECTION power"
    report_power -digits 6
    puts "MACTILE_DONE"
}

if {[catch mactile_main err]} {
    puts "MACTILE_ERROR $err"
    exit 1
}
